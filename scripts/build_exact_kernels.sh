#!/usr/bin/env bash
# Build batch-invariant CPU kernels for exact greedy speculative decoding (see ggufspec/llama/kernels.py).
#
# llama.cpp's CPU backend multiplies batches of 2+ rows with llamafile's tinyBLAS and single rows
# with ggml's own dot products; for F32/F16/BF16 weights the two round differently, so a verify
# batch can flip a greedy near-tie. This builds llama.cpp's CPU backend (libggml-cpu) without
# llamafile, from the llama.cpp source inside the llama-cpp-python sdist of the installed version,
# and puts it beside copies of the installed libraries in ~/.cache/ggufspec/kernels/. ggufspec
# loads it from there on its own; GGUFSPEC_KERNELS=stock turns it off. About a minute on 2 cores.
#
#   scripts/build_exact_kernels.sh          # once per llama-cpp-python version (a no-op when built)
#   FORCE=1 scripts/build_exact_kernels.sh  # rebuild
set -euo pipefail

JOBS="${JOBS:-2}"

# where the overlay goes and what it copies: ggufspec.llama.kernels says, as it does when loading it
{ read -r OUT; read -r INSTALLED; } < <(python -c 'from ggufspec.llama import kernels; print(kernels.overlay_dir()); print(kernels.installed_lib_dir())')
if [[ ! -f "$INSTALLED/libllama.so" ]]; then
  echo "error: no libllama.so in $INSTALLED; install ggufspec (pip install -e .) in this environment first" >&2
  exit 2
fi
# built, and for this very build of llama-cpp-python (a reinstall makes the overlay stale)
if [[ -z "${FORCE:-}" ]] && python -c 'import sys; from ggufspec.llama import kernels; sys.exit(kernels.current_overlay() is None)'; then
  echo "exact kernels already built: $OUT"
  exec "$(dirname "$0")/build_rpc_backend.sh"  # --rpc and `ggufspec rpc-server` (a no-op when built)
fi
LLAMA_CPP_PYTHON_VERSION="$(python -c 'from ggufspec.llama import kernels; print(kernels.installed_version())')"
source "$(dirname "$0")/llama_cpp_source.sh"
KERNELS="$(dirname "$(dirname "$OUT")")"  # <cache>/kernels: the overlay and its temporary sibling

BUILD="$DIR/build-exact-$VERSION"
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DGGML_NATIVE=ON \
  -DGGML_LLAMAFILE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF >"$BUILD.log" 2>&1 \
  || { cat "$BUILD.log" >&2; echo "error: cmake could not configure llama.cpp (log above)" >&2; exit 1; }
echo "building llama.cpp's CPU backend without llamafile (about a minute on 2 cores)"
cmake --build "$BUILD" --config Release -j "$JOBS" --target ggml-cpu >>"$BUILD.log" 2>&1 \
  || { tail -30 "$BUILD.log" >&2; echo "error: the build failed (log: $BUILD.log)" >&2; exit 1; }

# Assemble in a temporary directory, then rename: a half-built overlay is never picked up.
mkdir -p "$KERNELS"
TMP="$(mktemp -d "$KERNELS/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp -a "$INSTALLED"/. "$TMP"/
rm -f "$TMP"/libggml-cpu.so*
cp -a "$BUILD"/bin/libggml-cpu.so* "$TMP"/
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
python - "$OUT" <<'PY'
import os, subprocess, sys
env = dict(os.environ, LLAMA_CPP_LIB_PATH=sys.argv[1])
info = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                      env=env, capture_output=True, text=True, check=True).stdout
if "LLAMAFILE = 1" in info:
    sys.exit(f"error: the overlay in {sys.argv[1]} still reports llamafile: {info.strip()}")
PY
echo "built: $OUT (llama.cpp CPU backend without llamafile, llama-cpp-python $VERSION)"
"$(dirname "$0")/build_rpc_backend.sh"  # llama.cpp RPC backend for --rpc (about 30 s)
