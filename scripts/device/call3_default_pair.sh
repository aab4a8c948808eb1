#!/usr/bin/env bash
# device call 3 (warm): the last model piece; the real default pair on the GPU, with the patch call 1 chose
. .gpu/env.sh || exit 1
ls -la $G || exit 1
echo "patch: $(wc -c < /tmp/keep/patch.py) bytes"; cat /tmp/keep/patch.py | head -5
gp() { python3 -X faulthandler -c "exec(open('/tmp/keep/patch.py').read()); from ggufspec.cli import main; main()" "$@"; }
timeout 60 bash -c "$(declare -f gp); gp devices; gp plan" > $OUT/plan.txt 2>&1; tail -30 $OUT/plan.txt
P1="Explain in three short paragraphs why the sky is blue."
P2="Write a Python function that returns the n-th Fibonacci number, with a docstring and two tests."
for p in "$P1" "$P2"; do
  timeout 90 bash -c "$(declare -f gp); gp run --chat -p \"\$1\" -n 256 --compare --repeats 3" _ "$p" 2>&1 | grep -v "^ggml_cuda_init\|^  Device 0" | tee -a $OUT/run_compare.txt | tail -25
done
timeout 60 bash -c "$(declare -f gp); gp run --chat -p \"\$1\" -n 256 --compare --repeats 3 --json" _ "$P1" > $OUT/run_compare.json 2> $OUT/run_compare_json.err; echo json rc=$?; tail -c 1500 $OUT/run_compare.json
timeout 60 bash -c "$(declare -f gp); gp plan --measure" > $OUT/plan_measure.txt 2>&1; echo measure rc=$?; tail -30 $OUT/plan_measure.txt
nvidia-smi --query-gpu=memory.used --format=csv,noheader
