#!/usr/bin/env bash
# device session 3: the crash is in llama_model::print_info (libllama) calling iostream code that resolves
# into libggml-cuda.so; which symbols bind where, and two fixes, repeated
. .gpu/build.sh  # the CUDA build and env.sh; sets t0
python3 -c "
import sys; sys.path.insert(0, 'tests')
from pathlib import Path
from tiny_models import write_tiny_llama
write_tiny_llama(Path('/tmp/keep/tiny.gguf'), vocab='bytes', seed=0); write_tiny_llama(Path('/tmp/keep/tiny2.gguf'), vocab='bytes', seed=1)
" || exit 1
L=$SITE/llama_cpp/lib
echo "== libggml-cuda: libstdc++ symbols it exports: $(nm -D --defined-only $L/libggml-cuda.so.0 | grep -c 'St\|_ZNS') (codecvt: $(nm -D --defined-only $L/libggml-cuda.so.0 | grep -c codecvt))"
nm -D --defined-only $L/libggml-cuda.so.0 | grep "_M_insert" | head -3
readelf -d $L/libllama.so | grep NEEDED; readelf -d $L/libggml.so.0 | grep NEEDED; readelf -d $L/libggml-cuda.so.0 | grep NEEDED
RUN='import sys
from ggufspec.cli import main
sys.argv = ["ggufspec", "run", "--target", "/tmp/keep/tiny.gguf", "--draft", "/tmp/keep/tiny2.gguf", "-p", "hello world", "-n", "24", "--compare", "--repeats", "1"]
main()'
echo "$RUN" > /tmp/keep/crash2.py
printf 'import ctypes\nctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)\n%s\n' "$RUN" > /tmp/keep/fixA.py
LD_DEBUG=bindings timeout 30 python3 /tmp/keep/crash2.py 2>&1 | grep "_M_insertIl\|_M_insertIm" | head -6
r() { for i in $(seq $2); do timeout 30 env $3 python3 $1 > /dev/null 2>&1; echo -n "rc=$? "; done; echo " <- $1 $3"; }
r /tmp/keep/crash2.py 4
r /tmp/keep/fixA.py 5
r /tmp/keep/crash2.py 4 LD_BIND_NOW=1
echo "done at $(( $(date +%s) - t0 )) s"
