#!/usr/bin/env bash
# The GPU check, prepared here and run on a lent device machine (docs/gpu.md says what it found).
#
#   scripts/device/travel.sh light      # here: docs/bench out of what a call sends (then `full` after)
#   scripts/device/bundle.sh            # here, once: .gpu/a, .gpu/b, ... (see there)
#   device run, carry .gpu/a:  bash scripts/device/check.sh stage   # starts the CUDA build, keeps piece 0
#   device run, carry .gpu/b:  bash scripts/device/check.sh stage   # keeps piece 1 (within 30 s: warm)
#   ... one call a folder; the last folder's call:
#   device run, carry .gpu/d:  bash scripts/device/check.sh run     # the draft whole; waits for the build;
#                                                                   # measures; results under $OUT
#   scripts/device/check.sh run --cpu   # here: the same steps on the CPU build, at a small size
#
# `run` steps, in the order of what is worth most if the call is cut, each under its own time limit
# inside BUDGET seconds (default 560; a step that would not fit is skipped and says so), everything
# logged to $OUT/check.log and packed into $OUT/results.tgz after each step. Results stay on the
# machine (KEEP/work) and a step that finished is not run again, so a second `run` call while the
# machine is warm goes on where the first stopped:
#   devices       nvidia-smi, `ggufspec devices`
#   derive        the Q8_0 target and the stand-ins from the shipped Q4_1, timed
#   regime-*      bench --regimes default (4 prompts a set), then as-7b and as-1b (2 each; 2 repeats,
#                 128 tokens; the models where `run` puts them, every layer on the GPU): target
#                 alone, K = 2/4/8, always-draft, the default, in lockstep; `identical` counts exactness
#   hostpy        scripts/overhead.py on the device's host: our Python a round on fake models (and on
#                 a simulated device, rounds of the target alone launched ahead or not)
#   pipeline-default  scripts/pipeline_ab.py: rounds launched ahead off against on, in lockstep, on the GPU
#   threads1-default  the default pair's regime with --threads 1 (llama.cpp's CPU threads poll)
#   firstgen-*    scripts/device/firstgen.py: a user's one-shot run in fresh processes
#   ab-switch-*   scripts/control_ab.py on the GPU: the controller with rule switch_cost off against
#                 on (lockstep, with the target alone and fixed K = 8), default pair (then as-7b, later)
#   serve         scripts/serve_compare.py: ggufspec serve against llama-server with the same draft
#                 (-md, --spec-draft-n-max 8) and without, 1 and 4 clients, smollm2-as-7b (2 passes,
#                 and ggufspec serve --always-draft: its slots draft while others generate, where the
#                 default runs the target alone; the fifth run: 0.85x llama-server + draft at 4)
#                 then default (1)
#   ab-extend-*, kvown-default: measured in the fifth run (docs/gpu.md), not run since
#   exact-*       scripts/device/exactness.py on the default pair, then smollm2-as-7b: N greedy
#                 generations of the default and each fixed K against the target alone, with the
#                 stock kernels and with the row-invariant dispatch (scripts/device/row_invariant.py,
#                 patched into this build: GGUFSPEC_CUDA_ROW_INVARIANT=1 GGML_CUDA_DISABLE_FUSION=1)
#   plan-measure  plan --measure for smollm2-as-7b at --vram budgets that put 16, 32, 48 of its 64
#                 blocks on the GPU (planner against llama.cpp's real allocation), then run --compare
#   graphs-default  exactness.py on the default pair with CUDA graphs off (GGML_CUDA_DISABLE_GRAPHS=1):
#                 what re-capturing a graph at each shape change costs
#   batchrows-*   the two regimes again with GGUFSPEC_DRAFT_ONE_ROW=0: the draft's 2-token catch-up
#                 as one decode, whose row count changes every round (what one_row saves)
#   identity      greedy text of each stand-in against the embedded Q8_0 (2 prompts)
# (The order puts first what the controller's rules need measured on a GPU: the regimes, rule
# switch_cost's A/B, serve against llama-server; exactness, offload and the one-row A/B after.)
set -uo pipefail
MODE=${1:-run}
CPU=0; [[ "${2:-}" == "--cpu" ]] && CPU=1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
KEEP=${GGUFSPEC_DEVICE_KEEP:-/tmp/gk}
OUT=${OUT:-/tmp/device-out}
BUDGET=${BUDGET:-560}
T0=$(date +%s)
mkdir -p "$KEEP" "$OUT"
LOG=$OUT/check.log
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }

build_cuda() {  # in the background: libraries and llama-server for this GPU's architecture only
  local arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
  mkdir -p "$KEEP/src" && tar xzf "$KEEP/llama.tar.gz" -C "$KEEP/src" || return 1
  python3 "$ROOT/scripts/device/row_invariant.py" "$KEEP/src/llama.cpp" || return 1  # off unless asked (env)
  cmake -S "$KEEP/src/llama.cpp" -B "$KEEP/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_CUDA_NCCL=OFF -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF || return 1
  cmake --build "$KEEP/build" -j "$(nproc)" --target llama mtmd llama-server
}

stage() {
  for d in .gpu/*/; do cp -a "$d". "$KEEP"/; done
  if [[ -f "$KEEP/llama.tar.gz" && ! -f "$KEEP/build.started" ]]; then
    touch "$KEEP/build.started"
    export -f build_cuda; export KEEP ROOT
    setsid nohup bash -c 'T=$(date +%s); build_cuda; rc=$?; echo "$rc $(( $(date +%s) - T ))" > "$KEEP/build.rc"' \
      > "$KEEP/build.log" 2>&1 < /dev/null &
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$KEEP/site" "$KEEP"/whl/*.whl \
      && tar xzf "$KEEP/pysite.tar.gz" -C "$KEEP/site" && touch "$KEEP/site.ok"
  fi
  ls -la "$KEEP" | tee -a "$LOG"
}

setup_device() {  # the draft whole, the build done, the CUDA libraries under llama_cpp
  if [[ ! -f "$KEEP/model.ok" ]]; then
    local whl="$KEEP/$(cat "$KEEP/model.name")"
    local n; n=$(cat "$KEEP/model.pieces")
    for i in $(seq 1 "$n"); do [[ -f "$KEEP/m$i" ]] || { log "draft piece m$i missing: carry each .gpu folder in turn"; return 1; }; done
    cat $(for i in $(seq 0 "$n"); do echo "$KEEP/m$i"; done) > "$whl" || return 1
    [[ "$(sha256sum "$whl" | cut -c1-64)" == "$(cat "$KEEP/model.sha256")" ]] || { log "draft wheel: sha256 mismatch"; return 1; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$KEEP/site" "$whl" && touch "$KEEP/model.ok"
  fi
  log "waiting for the CUDA build"
  while [[ ! -f "$KEEP/build.rc" ]] && (( $(date +%s) - T0 < 400 )); do sleep 2; done
  [[ -f "$KEEP/build.rc" ]] || { tail -5 "$KEEP/build.log"; log "build not done in time"; return 1; }
  read -r rc secs < "$KEEP/build.rc"
  log "CUDA build: rc $rc in ${secs}s"
  (( rc == 0 )) || { tail -30 "$KEEP/build.log" | tee -a "$LOG"; return 1; }
  cp -a "$KEEP"/build/bin/*.so* "$KEEP/site/llama_cpp/lib/"
  LLAMA_SERVER=$KEEP/build/bin/llama-server
  local c; c=$(dirname "$(dirname "$(command -v nvcc)")")
  export LD_LIBRARY_PATH=$c/lib64:$c/lib:$c/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}
  export PYTHONPATH=$ROOT:$KEEP/site GGUFSPEC_CACHE=$KEEP/cache PYTHONUNBUFFERED=1
  PY=python3
}

setup_cpu() {  # here: the project's venv and scripts/build_native.sh's llama-server, if built
  . "$ROOT/.venv/bin/activate"
  PY=python
  LLAMA_SERVER=$($PY -c 'from ggufspec.bench import native_dir; print(native_dir() / "llama-server")')
}

gs() { $PY -c 'import sys; from ggufspec.cli import main; sys.argv[0] = "ggufspec"; sys.exit(main())' "$@"; }

W=$KEEP/work  # on the machine: a later call while it is warm goes on from here
pack() { tar czf "$OUT/results.tgz.tmp" -C "$W" . 2>/dev/null && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }

step() {  # step NAME SECONDS COMMAND...: run with a limit inside the budget, or skip
  local name=$1 want=$2; shift 2
  if [[ -f "$W/$name.done" ]]; then log "$name: done in an earlier call"; return; fi
  local left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
  if (( left < 20 )); then log "$name: skipped (${left}s of the budget left)"; return; fi
  (( want > left )) && want=$left
  log "$name: start (limit ${want}s)"
  local t=$(date +%s)
  timeout -k 5 "$want" bash -c "$*" >> "$W/$name.txt" 2>&1
  local rc=$?
  log "$name: rc $rc in $(( $(date +%s) - t ))s"
  (( rc == 0 )) && touch "$W/$name.done"
  tail -n 25 "$W/$name.txt" | tee -a "$LOG" > /dev/null
  pack
}

measure() {
  mkdir -p "$W"
  # regimes: --limit prompts per set, --repeats lockstep passes, -n new tokens (default pair, then big)
  local big=as-7b pair=smollm2-as-7b lim=4 limb=2 repeats=2 n=128 tokens=64 sr=2 np=6 ne=192 npb=4 neb=160 abp=3 abn=6
  if (( CPU )); then big=as-1b; pair=smollm2-as-1b; lim=1; limb=1; repeats=1; n=16; tokens=16; sr=1; np=2; ne=24; npb=2; neb=24; abp=1; abn=1; fi
  export -f gs; export PY
  regime() {  # regime STEP REGIME LIMIT [ENV...]: one bench --regimes step into $W/STEP
    local name=$1 r=$2 l=$3; shift 3
    echo "$* gs bench --regimes $r --limit $l --repeats $repeats -n $n --no-plots --out $W/$name"
  }
  ab() {  # ab REGIME SET: scripts/control_ab.py, rule switch_cost off (old) against on (new), on the GPU
    echo "\$PY scripts/control_ab.py $abp $W/ab-switch-$1-$2.json --regime $1 --set $2 --limit $abn --ngl auto --old switch_cost=0 --new switch_cost=1"
  }
  # exactness NAME TARGET PROMPTS TOKENS: the command of an exact-* step, stock kernels then the
  # row-invariant dispatch (same prompts and tokens), into NAME-stock.json and NAME-invariant.json
  exactness() {
    local run="\$PY scripts/device/exactness.py --target $2 --prompts $3 -n $4 --out $W/$1"
    echo "$run-stock.json; GGUFSPEC_CUDA_ROW_INVARIANT=1 GGML_CUDA_DISABLE_FUSION=1 $run-invariant.json"
  }
  step devices 30 "nvidia-smi 2>&1 | head -20; gs devices"
  step derive 90 "for r in smollm2:Q8_0 smollm2-as-1b:Q8_0 smollm2-as-7b:Q8_0; do
      [[ $CPU == 1 && \$r == smollm2-as-7b:Q8_0 ]] && continue
      \$PY -c \"import time; t = time.time(); from ggufspec.models.embedded import resolve_embedded as r; p = r(*'\$r'.split(':')); print(p, f'{time.time() - t:.1f} s')\"; done"
  # the models where run puts them (every layer on the GPU), the draft decoding one row at a time
  step regime-default 120 "$(regime regimes-default default "$lim")"
  step "regime-$big" 150 "$(regime "regimes-$big" "$big" "$limb")"
  (( CPU )) || step regime-as-1b 100 "$(regime regimes-as-1b as-1b "$limb")"
  # our Python on this host (the fifth run: where nothing pays, 0.12 ms a round over the target
  # alone's, 3x what the 2-core EPYC's microbenchmark reads): the microbenchmark here, on fake models
  # (--device-ms: the same on a simulated device of the default pair's step, rounds launched ahead or not)
  step hostpy 90 "\$PY scripts/overhead.py --modes alone K4 default:pays default:h200 lookup:pays --repeats 3 --rounds 500 --device-ms 1.35"
  # rounds of the target alone launched ahead (the bookkeeping under the decode) off against on, in
  # lockstep, the target alone and the default; where nothing pays most rounds are launched ahead
  (( CPU )) || step pipeline-default 100 "\$PY scripts/pipeline_ab.py 2 $W/pipeline-default.json --limit 4"
  # llama.cpp's CPU threads (physical cores by default) poll after each decode even with every
  # layer on the GPU; the default pair's regime with one thread tells whether they slow our Python
  step threads1-default 120 "$(regime threads1-default default "$lim") --threads 1"
  # a user's one-shot run: a fresh process and controller each (rule probe_b; the fourth run's first
  # generation under a fresh controller ran K = 1 in 59 of 65 rounds, docs/bench/controller.md), and
  # remembering (the second run starts from the first's controller: ggufspec.remember)
  step "firstgen-$big" 200 "\$PY scripts/device/firstgen.py --pair $pair --runs 2 -n $n --out $W/firstgen-$big.json"
  if [[ -x "$LLAMA_SERVER" ]]; then
    step serve 200 "\$PY scripts/serve_compare.py --pair $pair --llama-server $LLAMA_SERVER --tokens $tokens --clients 1 4 --repeats $sr --limit 2 --always-draft --out $W/serve_$big --startup-timeout 120
                    \$PY scripts/serve_compare.py --llama-server $LLAMA_SERVER --tokens $tokens --clients 1 4 --repeats 1 --limit 2 --out $W/serve_default --startup-timeout 60"
  else
    log "serve: skipped (no llama-server at $LLAMA_SERVER; scripts/build_native.sh builds it)"
  fi
  # the controller's rule switch_cost (on where the target runs on a GPU) off against on, in lockstep
  step ab-switch-default 120 "$(ab default tuned); $(ab default heldout)"
  step "ab-switch-$big" 150 "$(ab "$big" tuned)"
  step exact-default 150 "$(exactness exact-default embedded:smollm2:Q8_0 "$np" "$ne")"
  step "exact-$big" 180 "$(exactness "exact-$big" "embedded:$pair:Q8_0" "$npb" "$neb")"
  if (( ! CPU )); then
    step plan-measure 150 "for v in 2390MiB 4210MiB 6030MiB; do
        echo \"== --vram \$v\"
        gs plan --pair $pair --vram \$v --margin 0 --json > $W/plan-\$v.json
        gs plan --pair $pair --vram \$v --margin 0 --measure 2>&1 | grep -v ggml_cuda_init | tail -28; done
      for v in 2390MiB 4210MiB 6030MiB; do
        ngl=\$(\$PY -c 'import json,sys; print(json.load(open(sys.argv[1]))[\"devices\"][0][\"target_layers\"])' $W/plan-\$v.json)
        echo \"== --vram \$v: \$ngl target layers on the GPU\"
        gs run --pair $pair --ngl \$ngl --ngld all --chat -p 'Explain how a bicycle gear works.' -n 64 --compare --repeats 2 2>&1 | tail -4; done"
  fi
  # CUDA graphs: llama.cpp re-warms (2 calls) and re-captures its graph whenever a decode's shape
  # changes, which speculation does every round; the same runs with graphs off tell what that costs
  step graphs-default 90 "GGML_CUDA_DISABLE_GRAPHS=1 \$PY scripts/device/exactness.py --target embedded:smollm2:Q8_0 --prompts 4 -n $ne --out $W/graphs-off-default.json"
  # the same regimes with the draft's 2-token catch-up as one decode (its row count changes every
  # round: llama.cpp re-warms and re-captures the draft's CUDA graph), to price one_row
  step "batchrows-$big" 130 "$(regime "batchrows-$big" "$big" "$limb" GGUFSPEC_DRAFT_ONE_ROW=0)"
  step batchrows-default 110 "$(regime batchrows-default default "$lim" GGUFSPEC_DRAFT_ONE_ROW=0)"
  step identity 60 "for t in $pair; do
      for p in 'Why is the sky blue?' 'Write a Python function that checks whether a number is prime.'; do
        a=\$(gs run --target embedded:smollm2:Q8_0 --draft none --chat -p \"\$p\" -n 48 --json | \$PY -c 'import json,sys; print(json.load(sys.stdin)[\"text\"])')
        b=\$(gs run --target embedded:\$t:Q8_0 --draft none --chat -p \"\$p\" -n 48 --json | \$PY -c 'import json,sys; print(json.load(sys.stdin)[\"text\"])')
        [[ \"\$a\" == \"\$b\" ]] && echo \"\$t identical: \$p\" || echo \"\$t DIFFERS: \$p :: \${a:0:80} || \${b:0:80}\"
      done; done"
  cat "$W"/regimes-*/regimes.md > "$OUT/regimes.md" 2>/dev/null
  pack
  log "done"
}

case "$MODE" in
  stage) stage ;;
  run)
    if (( CPU )); then setup_cpu; else compgen -G ".gpu/*/m[0-9]" > /dev/null && stage > /dev/null; setup_device || exit 1; fi
    measure ;;
  *) echo "usage: check.sh stage | run [--cpu]" >&2; exit 2 ;;
esac
