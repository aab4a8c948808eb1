#!/usr/bin/env bash
# Build llama.cpp's RPC backend (libggml-rpc.so) into the exact-kernels overlay, for `--rpc` and
# `ggufspec rpc-server` (see ggufspec/llama/devices.py). build_exact_kernels.sh calls this.
#
# A loadable backend module (GGML_BACKEND_DL=ON) from the same vendored llama.cpp source as the
# installed llama-cpp-python: ggufspec loads it into the libggml that libllama uses and registers
# workers there. It does no arithmetic itself (a worker computes with the CPU backend of the
# process that serves it: ggufspec's own, batch-invariant), so GGML_LLAMAFILE does not matter here;
# it stays OFF all the same. Only the ggml-rpc target is built: about 15-30 s on 2 cores.
#
#   scripts/build_rpc_backend.sh          # a no-op when the overlay already has it
#   FORCE=1 scripts/build_rpc_backend.sh  # rebuild
set -euo pipefail

JOBS="${JOBS:-2}"
OUT="$(python -c 'from ggufspec.llama import kernels; print(kernels.overlay_dir())')"
if [[ ! -d "$OUT" ]]; then
  echo "error: no exact-kernels overlay in $OUT; run scripts/build_exact_kernels.sh first" >&2
  exit 2
fi
if [[ -z "${FORCE:-}" && -f "$OUT/libggml-rpc.so" ]]; then
  echo "RPC backend already built: $OUT/libggml-rpc.so"
  exit 0
fi
LLAMA_CPP_PYTHON_VERSION="$(python -c 'from ggufspec.llama import kernels; print(kernels.installed_version())')"
source "$(dirname "$0")/llama_cpp_source.sh"

BUILD="$DIR/build-rpc-$VERSION"
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DGGML_BACKEND_DL=ON \
  -DGGML_RPC=ON -DGGML_RPC_RDMA=OFF \
  -DGGML_NATIVE=OFF \
  -DGGML_LLAMAFILE=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF >"$BUILD.log" 2>&1 \
  || { cat "$BUILD.log" >&2; echo "error: cmake could not configure llama.cpp's RPC backend (log above)" >&2; exit 1; }
echo "building llama.cpp's RPC backend (about 30 s on 2 cores)"
cmake --build "$BUILD" --config Release -j "$JOBS" --target ggml-rpc >>"$BUILD.log" 2>&1 \
  || { tail -30 "$BUILD.log" >&2; echo "error: the RPC backend build failed (log: $BUILD.log)" >&2; exit 1; }

# copy under a temporary name, then rename: a half-copied module is never loaded
cp "$BUILD/bin/libggml-rpc.so" "$OUT/.libggml-rpc.so.tmp"
mv "$OUT/.libggml-rpc.so.tmp" "$OUT/libggml-rpc.so"
echo "built: $OUT/libggml-rpc.so (llama.cpp RPC backend, llama-cpp-python $VERSION)"
