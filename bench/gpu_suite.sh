#!/usr/bin/env bash
# Every GPU measurement of docs/performance.md in one run, each step with its own time bound,
# for a GPU machine that starts bare:
#   bash bench/gpu_suite.sh [OUT_DIR] [STEP ...]      # default OUT_DIR: $OUT, else a new temp folder
# Steps, in priority order (the suite's deadline, SUITE_SECONDS, default 570, skips the tail): env
# wan-model flux-model families families-compiled levers smoke wan-reference tests attention
# wan-profile flux-reference (name some to run only those; install is always run). Variables:
# COMPILED_FAMILIES (bench/gpu_families.py --families), SMOKE_ARGS and SMOKE_SECONDS (gpu_smoke.py). Writes OUT_DIR/suite.log (every step's
# output), OUT_DIR/summary.json and OUT_DIR/summary.md (step, exit status, seconds, bound).
#
# Python packages the machine lacks are installed from wheels in .whl/ (if there) into
# /tmp/sporch-site; sporch itself is put on the path from this checkout (no build). To fetch
# the wheels on a machine with a package index:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     diffusers==0.42.1 omegaconf==2.4.0 submitit importlib_metadata==8.7.0 ftfy wcwidth \
#     torchao==0.16.0 sageattention==1.0.6 imageio-ffmpeg==0.6.0 accelerate
# (accelerate: every model is a diffusers class, built with its parameters on the meta device.)
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT_DIR=${1:-${OUT:-$(mktemp -d -t sporch-gpu-suite-XXXXXX)}}
shift || true
mkdir -p "$OUT_DIR"
LOG=$OUT_DIR/suite.log
: >"$LOG"
PY=${PYTHON:-python3}
DEADLINE=$(( $(date +%s) + ${SUITE_SECONDS:-570} ))
WANT=" $* "
declare -a ROWS=()

run_step() {  # name bound_seconds command...
  local name=$1 bound=$2; shift 2
  if [ "$WANT" != "  " ] && [[ "$WANT" != *" $name "* ]] && [ "$name" != install ]; then return; fi
  export ROOT PY
  local left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt 10 ]; then ROWS+=("$name|skipped|0|$bound"); echo "== $name: skipped (suite deadline)" >>"$LOG"; return; fi
  [ "$bound" -gt "$left" ] && bound=$left
  echo "== $name (bound ${bound}s): $*" | tee -a "$LOG"
  local start=$(date +%s)
  if [ "$(type -t "$1")" = function ]; then
    timeout -k 5 "$bound" bash -c "$(declare -f "$1"); $*" >>"$LOG" 2>&1
  else
    timeout -k 5 "$bound" "$@" >>"$LOG" 2>&1
  fi
  local rc=$?
  local secs=$(( $(date +%s) - start ))
  ROWS+=("$name|$rc|$secs|$bound")
  echo "== $name: exit $rc in ${secs}s" | tee -a "$LOG"
}

install_deps() {
  local site=/tmp/sporch-site ns=/tmp/sporch-ns/sporch
  mkdir -p "$site" "$ns"
  if ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$site" "$ROOT"/.whl/*.whl || return 1
  fi
  ln -sfn "$ROOT/orchestrator" "$ns/orchestrator"
  ln -sfn "$ROOT/runtime" "$ns/runtime"
  "$PY" -c "import sporch.orchestrator.plan.planner, sporch.runtime.models, diffusers, accelerate; print('diffusers', diffusers.__version__, 'accelerate', accelerate.__version__)"
}

environment() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  "$PY" - <<'EOF'
import torch
print("torch", torch.__version__, "CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
      "NCCL", ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else "-")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", p.name, "sm", f"{p.major}.{p.minor}", "SMs", p.multi_processor_count, "memory GiB", round(p.total_memory / 2**30, 1))
for mod in ("diffusers", "accelerate", "transformers", "triton", "flash_attn", "flash_attn_interface", "sageattention",
            "torchao"):
    try:
        m = __import__(mod)
        print(mod, getattr(m, "__version__", "present"))
    except Exception as e:  # noqa: BLE001
        print(mod, "absent", type(e).__name__)
EOF
}

export PYTHONPATH=/tmp/sporch-site:/tmp/sporch-ns${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
run_step install 40 install_deps
run_step env 20 environment
# in priority order: the suite's deadline skips the tail
# gpu_model: diffusers' class and sporch's path, eager and compiled, in one process (two compiles)
run_step wan-model 110 "$PY" bench/gpu_model.py --models wan --warmup 1 --repeat 3
run_step flux-model 120 "$PY" bench/gpu_model.py --models flux --warmup 1 --repeat 3
run_step families 90 "$PY" bench/gpu_families.py --no-compile
run_step families-compiled 120 "$PY" bench/gpu_families.py --families ${COMPILED_FAMILIES:-qwen-image hunyuanvideo sd3}
run_step levers 80 "$PY" bench/gpu_levers.py --warmup 1 --repeat 3
run_step smoke ${SMOKE_SECONDS:-60} "$PY" bench/gpu_smoke.py --timeout 25 ${SMOKE_ARGS:-}
run_step wan-reference 40 "$PY" bench/gpu_reference.py --models wan
run_step tests 40 "$PY" -m pytest -q -p no:cacheprovider -o addopts="" -rs -k cuda \
  tests/runtime/attention/test_runtime_kernels.py tests/runtime/attention/test_runtime_select.py
run_step attention 60 "$PY" bench/gpu_attention.py --heads 24
run_step wan-profile 110 "$PY" bench/gpu_model.py --models wan --warmup 1 --repeat 3 --profile
run_step flux-reference 50 "$PY" bench/gpu_reference.py --models flux

{
  echo "| step | exit | seconds | bound |"; echo "|---|---|---|---|"
  for r in "${ROWS[@]}"; do IFS='|' read -r n rc s b <<<"$r"; echo "| $n | $rc | $s | $b |"; done
} >"$OUT_DIR/summary.md"
"$PY" - "$OUT_DIR/summary.json" "${ROWS[@]}" <<'EOF'
import json, sys
rows = [dict(zip(("step", "exit", "seconds", "bound"), r.split("|"))) for r in sys.argv[2:]]
json.dump(rows, open(sys.argv[1], "w"), indent=1)
EOF
cat "$OUT_DIR/summary.md"
