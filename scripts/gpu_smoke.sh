#!/usr/bin/env bash
# One-GPU smoke run of examples/gpu_humaneval.yaml: a few GRPO steps of a ~0.5B instruct model sampled by
# vLLM, then it prints generation tokens/s, training tokens/s and peak GPU memory. Meant to finish in
# under 8 minutes (it stops itself at 7m50s). Not yet run on a GPU by this project.
#
#   MODEL=models/Qwen2.5-0.5B-Instruct scripts/gpu_smoke.sh
#
# Environment: MODEL (local model directory), STEPS (default 3), EVAL_TASKS (HumanEval problems evaluated
# before and after, default 32), OUT (run output directory, default runs/), PYTHON (default .venv/bin/python
# when present). Needs: nvidia-smi, the [train,vllm] extras, bubblewrap (the grading sandbox).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${MODEL:-models/Qwen2.5-0.5B-Instruct}
STEPS=${STEPS:-3}
EVAL_TASKS=${EVAL_TASKS:-32}
OUT=${OUT:-runs}
NAME=gpu_smoke_$(date +%Y%m%d_%H%M%S)
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

die() { echo "gpu_smoke: $*" >&2; exit 2; }
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs an NVIDIA GPU"
[[ -f "$MODEL/config.json" ]] || die "no model in $MODEL (config.json missing); download one, e.g.
  huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct --local-dir $MODEL"
"$PYTHON" -c "import vllm, torch; assert torch.cuda.is_available(), 'torch sees no CUDA device'" \
  || die "needs vLLM and a CUDA torch: pip install -e '.[train,vllm]'"

RUN_DIR="$OUT/$NAME"
mkdir -p "$OUT"
MEM_LOG=$(mktemp)
# GPU memory of device 0, sampled every second while the run lasts (vLLM's engine is its own process, so
# torch's counters in the trainer would miss it).
( while sleep 1; do nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0; done ) \
  >"$MEM_LOG" 2>/dev/null &
SAMPLER=$!
trap 'kill $SAMPLER 2>/dev/null || true; rm -f "$MEM_LOG"' EXIT

START=$(date +%s)
set +e
timeout --signal=INT 470 "$PYTHON" -m trialground train examples/gpu_humaneval.yaml \
  --set "policy.model=$MODEL" \
  --set "loop.steps=$STEPS" \
  --set loop.eval_interval=0 \
  --set "tasks.eval_sources=[{source: humaneval, limit: $EVAL_TASKS}]" \
  --set "output_dir=$OUT" \
  --set "name=$NAME"
STATUS=$?
set -e
WALL=$(( $(date +%s) - START ))
kill $SAMPLER 2>/dev/null || true

echo
echo "gpu_smoke: trialground train exited $STATUS after ${WALL}s (run directory $RUN_DIR)"
[[ -f "$RUN_DIR/metrics.jsonl" ]] || die "no metrics.jsonl: the run did not get to its first step"
"$PYTHON" - "$RUN_DIR/metrics.jsonl" "$MEM_LOG" <<'PY'
import json
import sys

steps = [m for m in map(json.loads, open(sys.argv[1])) if "train/tokens_per_s" in m]
if not steps:
    sys.exit("gpu_smoke: no training step finished")
# Every step's samples are one vLLM batch (rollout_concurrency >= batch_tasks x samples_per_task), so the
# slowest sample's generation time is that batch's wall time.
gen = [m["rollout/generated_tokens"] / m["env/generate_p99_s"] for m in steps if m.get("env/generate_p99_s")]
train = [m["train/tokens_per_s"] for m in steps]
mem = [tuple(int(x) for x in line.split(",")) for line in open(sys.argv[2]) if line.strip()]
print(f"steps finished:          {len(steps)}")
if gen:
    print(f"generation tokens/s:     {sum(gen) / len(gen):,.0f} (mean over steps; first {gen[0]:,.0f})")
print(f"training tokens/s:       {sum(train) / len(train):,.0f} (mean over steps; first {train[0]:,.0f})")
if mem:
    used, total = max(mem)
    print(f"peak GPU memory (dev 0): {used:,} MiB of {total:,} MiB")
for key in ("eval/pass@1", "reward/mean"):
    values = [m[key] for m in map(json.loads, open(sys.argv[1])) if key in m]
    if values:
        print(f"{key}:{' ' * (23 - len(key))}{values[0]:.3f} -> {values[-1]:.3f}")
PY
exit "$STATUS"
