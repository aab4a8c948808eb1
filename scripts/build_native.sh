#!/usr/bin/env bash
# Build llama.cpp's native peers: llama-speculative-simple and llama-bench (for `ggufspec bench`),
# llama-server (for scripts/serve_compare.py, the end-to-end comparison through the OpenAI API) and
# llama-batched-bench (llama.cpp's own cost of a step of several sequences, as the server merges them).
#
# The source is the llama.cpp that ships inside the llama-cpp-python sdist (vendor/llama.cpp), at the
# same version as the installed llama_cpp Python package, so both sides run the same kernels.
# CPU only, Release, only those four targets; the server's web UI is left out (no npm, no download:
# its pages answer 404, the API is whole). Run once; takes a while on a small machine.
#
#   scripts/build_native.sh                 # into ~/.cache/ggufspec/native (or $GGUFSPEC_NATIVE_DIR)
#   JOBS=4 scripts/build_native.sh          # more parallel compile jobs (default 2)
#   SDIST=path/to/llama_cpp_python-X.tar.gz scripts/build_native.sh   # use a downloaded sdist
#
# Afterwards `ggufspec bench` finds the binaries in <dir>/bin and measures against them.
set -euo pipefail

JOBS="${JOBS:-2}"
source "$(dirname "$0")/llama_cpp_source.sh"
mkdir -p "$DIR/bin"

BUILD="$DIR/build-$VERSION"
TARGETS=(llama-speculative-simple llama-bench llama-server llama-batched-bench)
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF
cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}"

for exe in "${TARGETS[@]}"; do
  found="$(find "$BUILD" -type f -name "$exe" -perm -u+x | head -n1)"
  [[ -n "$found" ]] || { echo "error: $exe was not built" >&2; exit 1; }
  cp "$found" "$DIR/bin/$exe"
done
echo "$VERSION" > "$DIR/bin/VERSION"
echo "built: ${TARGETS[*]/#/$DIR/bin/} (llama.cpp from llama-cpp-python $VERSION)"
