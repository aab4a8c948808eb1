#!/usr/bin/env bash
# device call 1 (fresh machine): build llama.cpp 0.3.36 with CUDA (libraries, no FA kernels), install,
# find which part of ggufspec's model load crashes on CUDA
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc
. .gpu/build.sh  # the CUDA build and env.sh; sets t0
python3 -c "import llama_cpp as l; print(l.llama_print_system_info().decode())" 2>&1 | tail -1
python3 -c "
import sys; sys.path.insert(0, 'tests')
from pathlib import Path
from tiny_models import write_tiny_llama
write_tiny_llama(Path('/tmp/keep/tiny.gguf'), vocab='bytes', seed=0); write_tiny_llama(Path('/tmp/keep/tiny2.gguf'), vocab='bytes', seed=1)
" || exit 1
timeout 200 python3 .gpu/load_variants.py /tmp/keep/tiny.gguf 2>&1 | tee $OUT/hyp.txt
timeout 150 python3 scripts/gpu_smoke.py /tmp/keep/tiny.gguf --timeout 40 2>&1 | tee $OUT/smoke.txt
echo "call 1 done at $(( $(date +%s) - t0 )) s"
