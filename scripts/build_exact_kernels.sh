#!/usr/bin/env bash
# Build batch-invariant CPU kernels for exact greedy speculative decoding (see ggufspec/llama/kernels.py).
#
# llama.cpp's CPU backend multiplies batches of 2+ rows with llamafile's tinyBLAS and single rows
# with ggml's own dot products; for F32/F16/BF16 weights the two round differently, so a verify
# batch can flip a greedy near-tie. This builds llama.cpp's CPU backend (libggml-cpu) so that every
# batch size takes one kernel, from the llama.cpp source inside the llama-cpp-python sdist of the
# installed version, and puts it beside copies of the installed libraries in
# ~/.cache/ggufspec/kernels/. ggufspec loads it from there on its own; GGUFSPEC_KERNELS=stock turns
# it off. About a minute on 2 cores. Two variants (KERNELS=...):
#   tinyblas  every batch size, one row included, through llamafile's tinyBLAS (its "only for
#             prompt processing" gate removed in a patched copy of sgemm.cpp, but for the types
#             already batch-invariant (Q8_0/Q4_0/Q4_1: ggufspec.loop.exactness), faster one row at a
#             time through ggml). The default on
#             x86-64, where tinyBLAS has no batch-size gate of its own. On the 2-core AVX2 EPYC:
#             one-row F32 decode 19.4-20.2 ms (ggml 19.2-19.5), 9 rows 46 ms (55), prefill 2.35
#             ms a token (3.55); on an AVX-512 EPYC the one-row decode was 10-15% slower.
#   ggml      llamafile off: ggml's dot products at every batch size. The default elsewhere.
#
#   scripts/build_exact_kernels.sh               # once per llama-cpp-python version (a no-op when built)
#   KERNELS=ggml scripts/build_exact_kernels.sh  # the other variant (rebuilds when it differs)
#   FORCE=1 scripts/build_exact_kernels.sh       # rebuild
set -euo pipefail

JOBS="${JOBS:-2}"

# where the overlay goes and what it copies: ggufspec.llama.kernels says, as it does when loading it
{ read -r OUT; read -r INSTALLED; } < <(python -c 'from ggufspec.llama import kernels; print(kernels.overlay_dir()); print(kernels.installed_lib_dir())')
if [[ ! -f "$INSTALLED/libllama.so" ]]; then
  echo "error: no libllama.so in $INSTALLED; install ggufspec (pip install -e .) in this environment first" >&2
  exit 2
fi
VARIANT="${KERNELS:-auto}"
if [[ "$VARIANT" == auto ]]; then
  [[ "$(uname -m)" == x86_64 ]] && VARIANT=tinyblas || VARIANT=ggml
fi
[[ "$VARIANT" == tinyblas || "$VARIANT" == ggml ]] || { echo "error: KERNELS must be tinyblas, ggml or auto, got $VARIANT" >&2; exit 2; }
# built, for this very build of llama-cpp-python (a reinstall makes the overlay stale), this variant
# and at the current revision of the patch (an older one is exact but slower: rebuilt)
if [[ -z "${FORCE:-}" ]] && python -c 'import sys; from ggufspec.llama import kernels; lib = kernels.current_overlay(); sys.exit(lib is None or kernels.overlay_variant(lib) != sys.argv[1] or kernels.overlay_revision(lib) != kernels.OVERLAY_REVISION)' "$VARIANT"; then
  echo "exact kernels ($VARIANT) already built: $OUT"
  exec "$(dirname "$0")/build_rpc_backend.sh"  # --rpc and `ggufspec rpc-server` (a no-op when built)
fi
LLAMA_CPP_PYTHON_VERSION="$(python -c 'from ggufspec.llama import kernels; print(kernels.installed_version())')"
source "$(dirname "$0")/llama_cpp_source.sh"
KERNELS="$(dirname "$(dirname "$OUT")")"  # <cache>/kernels: the overlay and its temporary sibling

BUILD="$DIR/build-exact-$VARIANT-$VERSION"
if [[ "$VARIANT" == tinyblas ]]; then
  # a copy of the source (hard links: no space) whose sgemm.cpp alone is patched, so the native
  # peers built from $SRC keep llama.cpp's stock kernels
  PATCHED="$DIR/src-exact-tinyblas-$VERSION"
  rm -rf "$PATCHED"
  cp -al "$SRC" "$PATCHED"
  SGEMM=ggml/src/ggml-cpu/llamafile/sgemm.cpp
  rm "$PATCHED/$SGEMM"
  python - "$SRC/$SGEMM" "$PATCHED/$SGEMM" <<'PY'
import sys
src, dst = sys.argv[1], sys.argv[2]
text = open(src).read()
gate = "    // only enable sgemm for prompt processing\n#if !defined(__MMA__)\n    if (n < 2)\n        return false;\n#endif\n"
if text.count(gate) != 1:
    sys.exit(f"error: {src} does not hold llamafile's one-row gate as expected; build with KERNELS=ggml")
# Every batch size, one row included, but for the weight types the stock kernels already compute
# batch-invariantly (ggufspec.loop.exactness, measured: ggml's one-row dot sums them in tinyBLAS's
# order): they keep llama.cpp's gate, faster (the Q4_1 draft with its Q8_0 output matrix: 6.8 ms a
# step against 8.6 through tinyBLAS; tinyBLAS has no Q4_1 case at all)
from ggufspec.loop.exactness import STOCK_BATCH_INVARIANT_TYPES
kept = " || ".join(f"Atype == GGML_TYPE_{t}" for t in sorted(STOCK_BATCH_INVARIANT_TYPES))
ours = ("    // ggufspec: every batch size, one row included, so a row's logits do not depend on its batch;\n"
        "    // types whose one-row dots sum in tinyBLAS's order keep the gate (faster)\n"
        f"    if (n < 2 && ({kept}))\n"
        "        return false;\n")
open(dst, "w").write(text.replace(gate, ours))
PY
  SRC="$PATCHED"
  LLAMAFILE=ON
else
  LLAMAFILE=OFF
fi
cmake -S "$SRC" -B "$BUILD" "${GEN[@]}" -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=ON \
  -DGGML_NATIVE=ON \
  -DGGML_LLAMAFILE=$LLAMAFILE \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
  -DLLAMA_BUILD_SERVER=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF >"$BUILD.log" 2>&1 \
  || { cat "$BUILD.log" >&2; echo "error: cmake could not configure llama.cpp (log above)" >&2; exit 1; }
echo "building llama.cpp's CPU backend with one kernel for every batch size ($VARIANT; about a minute on 2 cores)"
cmake --build "$BUILD" --config Release -j "$JOBS" --target ggml-cpu >>"$BUILD.log" 2>&1 \
  || { tail -30 "$BUILD.log" >&2; echo "error: the build failed (log: $BUILD.log)" >&2; exit 1; }

# Assemble in a temporary directory, then rename: a half-built overlay is never picked up.
mkdir -p "$KERNELS"
TMP="$(mktemp -d "$KERNELS/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
cp -a "$INSTALLED"/. "$TMP"/
rm -f "$TMP"/libggml-cpu.so*
cp -a "$BUILD"/bin/libggml-cpu.so* "$TMP"/
python -c 'import sys; from ggufspec.llama import kernels; kernels.write_marker(sys.argv[1], sys.argv[2])' "$TMP" "$VARIANT"
mkdir -p "$(dirname "$OUT")"
rm -rf "$OUT"
mv "$TMP" "$OUT"
trap - EXIT
python - "$OUT" "$VARIANT" <<'PY'
import os, subprocess, sys
env = dict(os.environ, LLAMA_CPP_LIB_PATH=sys.argv[1])
info = subprocess.run([sys.executable, "-c", "import llama_cpp; print(llama_cpp.llama_print_system_info().decode())"],
                      env=env, capture_output=True, text=True, check=True).stdout
if ("LLAMAFILE = 1" in info) != (sys.argv[2] == "tinyblas"):
    sys.exit(f"error: the overlay in {sys.argv[1]} ({sys.argv[2]}) reports the wrong llamafile setting: {info.strip()}")
PY
echo "built: $OUT (llama.cpp CPU backend, one kernel for every batch size: $VARIANT; llama-cpp-python $VERSION)"
"$(dirname "$0")/build_rpc_backend.sh"  # llama.cpp RPC backend for --rpc (about 30 s)
