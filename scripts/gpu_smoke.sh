#!/usr/bin/env bash
# One-GPU smoke run, made to run as it is where nothing can be fetched (the lent GPU machines: python3 with
# a CUDA PyTorch and transformers; no vLLM, no bubblewrap, no model hub). Prepare once on a networked machine:
#
#   scripts/device_bundle.sh          # .whl/: the wheels and bubblewrap package that image lacks
#
# then run it on the GPU machine with .whl/ beside the checkout: `scripts/gpu_smoke.sh`. It
#   1. installs .whl/ (no index) into /tmp/tg-site and bubblewrap's package into /tmp/tg-root, if present;
#   2. measures generation at ~100M parameters on the GPU for the architectures the lean decoder covers
#      (llama, qwen2, qwen3; benchmarks/generation.py --device cuda: lean decoder, our transformers loop,
#      `generate()`; 64 rows = 8 prompts x 8 samples, 64 tokens; then Llama at the GPU recipe's 128 rows x
#      256 tokens where time allows; GEN=0 skips it);
#   3. runs a few GRPO steps of examples/gpu_humaneval.yaml: sampled by vLLM where it is installed, else by
#      the in-process sampler on the GPU (policy.backend hf); on MODEL, or, where MODEL is left unset and
#      models/Qwen2.5-0.5B-Instruct is missing, on random weights in Qwen2.5-0.5B's shape made on the spot
#      (speed and memory are real, rewards are not); graded in bubblewrap sandboxes where one starts, else
#      with the `process` backend (no isolation: said loudly);
#   2b. trains in Qwen2.5-0.5B's shape with the trainer alone: FSDP2 on 2 x 4,096 tokens, then one
#      16,384-token sequence (benchmarks/train_step.py: tokens/s per GPU, peak memory against
#      docs/memory.md's estimate, MFU);
# and prints generation and training tokens/s and peak GPU memory. Everything stops by 7m50s. Where $OUT is
# set (the device tool's output folder), the summary and the generation results are copied there.
#
# Environment: MODEL (local model directory), STEPS (default 3), EVAL_TASKS (HumanEval problems evaluated
# before and after, default 32), RUNS (run output directory, default runs/), GEN (0: skip step 2),
# TRAIN_STEP (0: skip step 2b), PYTHON
# (default .venv/bin/python when present, else python3). REHEARSE=1 runs the same steps on the CPU with
# tiny shapes and no GPU (.whl/ not installed): the script's whole path, checked where there is no GPU
# (tests/test_gpu_example.py). SMOKE_WORK: where the made models and results go (default /tmp/tg-smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
START=$(date +%s)
DEFAULT_MODEL=models/Qwen2.5-0.5B-Instruct
MODEL_GIVEN=${MODEL:+yes}
MODEL=${MODEL:-$DEFAULT_MODEL}
STEPS=${STEPS:-3}
EVAL_TASKS=${EVAL_TASKS:-32}
RUNS=${RUNS:-runs}
GEN=${GEN:-1}
REHEARSE=${REHEARSE:-0}
NAME=gpu_smoke_$(date +%Y%m%d_%H%M%S)
WORK=${SMOKE_WORK:-/tmp/tg-smoke}  # made models, the summary, generation results
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

die() { echo "gpu_smoke: $*" >&2; exit 2; }
say() { echo "gpu_smoke: $*" | tee -a "$WORK/summary.txt"; }
left() { local s=$((470 - ($(date +%s) - START))); echo $((s > 30 ? s : 30)); }
if [[ "$REHEARSE" == 1 ]]; then
  DEVICE=cpu SHAPE=tiny GEN_ARGS=(--batch 16 --group 4 --tokens 16 --reps 1 --threads 1)
  TRAIN_ARGS=(--set policy.device=cpu --set policy.sampling.max_new_tokens=32 --set policy.eval_sampling.max_new_tokens=32
    --set loop.batch_tasks=2 --set loop.samples_per_task=2 --set pool.max_active=2)
else
  DEVICE=cuda SHAPE=smollm135m GEN_ARGS=(--batch 64 --group 8 --tokens 64 --reps 3)
  TRAIN_ARGS=()
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this needs an NVIDIA GPU"
fi
if [[ -n "$MODEL_GIVEN" && ! -f "$MODEL/config.json" ]]; then
  die "no model in $MODEL (config.json missing); unset MODEL to train random weights in Qwen2.5-0.5B's shape"
fi
mkdir -p "$WORK" "$RUNS"
: >"$WORK/summary.txt"
: >"$WORK/errors.log"  # what the generation comparisons printed on stderr

# 1. What the machine lacks, from .whl/ (scripts/device_bundle.sh); the checkout itself is on PYTHONPATH.
if [[ "$REHEARSE" != 1 ]] && compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/tg-site \
    .whl/*.whl || die "installing .whl/ failed (made for another Python? scripts/device_bundle.sh, PY_VERSION)"
  export PYTHONPATH=$PWD:/tmp/tg-site${PYTHONPATH:+:$PYTHONPATH}
fi
if ! command -v bwrap >/dev/null; then
  for deb in .whl/*.deb; do
    [[ -f $deb && "$REHEARSE" != 1 ]] && dpkg -x "$deb" /tmp/tg-root && export PATH=/tmp/tg-root/usr/bin:$PATH
  done
fi
MEM_LOG=$WORK/gpu_memory.csv
: >"$MEM_LOG"
SAMPLER=
if [[ "$DEVICE" == cuda ]]; then
  "$PYTHON" -c "import torch, trialground; assert torch.cuda.is_available(), 'torch sees no CUDA device'" \
    || die "needs trialground importable and a CUDA torch (pip install -e '.[train]', or .whl/ from scripts/device_bundle.sh)"
  say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader -i 0)"
  # GPU memory of device 0, sampled every second (a vLLM engine is its own process: torch's counters miss it).
  ( while sleep 1; do nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader,nounits -i 0; done ) \
    >"$MEM_LOG" 2>/dev/null &
  SAMPLER=$!
  trap 'kill $SAMPLER 2>/dev/null || true' EXIT
else
  say "REHEARSAL on the CPU with tiny shapes: no figure of this run says anything about a GPU"
fi
say "$("$PYTHON" -c "import sys, torch, transformers as t
print(f'Python {sys.version.split()[0]}, torch {torch.__version__}, transformers {t.__version__}')")"

# 2. Generation at ~100M parameters: the three ways side by side, per architecture.
if [[ "$GEN" != 0 ]]; then
  for arch in llama qwen2 qwen3; do
    (( $(left) > 240 )) || { say "generation: skipped $arch and after (time)"; break; }
    "$PYTHON" benchmarks/make_model.py --arch "$arch" --shape "$SHAPE" --out "$WORK/bench-$arch" >/dev/null 2>&1 \
      || { say "generation: could not make the $arch model"; continue; }
    timeout 90 "$PYTHON" benchmarks/generation.py --model "$WORK/bench-$arch" --device "$DEVICE" "${GEN_ARGS[@]}" \
      --json "$WORK/generation-$arch.json" 2>>"$WORK/errors.log" | grep -E "^(lean|loop|generate|tokens|[A-Z])" \
      | sed "s/^/gpu_smoke: generation $arch: /" | tee -a "$WORK/summary.txt" \
      || { say "generation $arch: failed or timed out; the end of errors.log:"; tail -5 "$WORK/errors.log"; }
  done
  # The GPU recipe's shape: 16 prompts x 8 samples, 256 of its up to 512 tokens (Llama only: time).
  if [[ "$DEVICE" == cuda ]] && (( $(left) > 330 )) && [[ -f "$WORK/bench-llama/config.json" ]]; then
    timeout 120 "$PYTHON" benchmarks/generation.py --model "$WORK/bench-llama" --device cuda --batch 128 --group 8 \
      --tokens 256 --reps 2 --json "$WORK/generation-llama-128x256.json" 2>>"$WORK/errors.log" \
      | grep -E "^(lean|loop|generate|tokens)" | sed "s/^/gpu_smoke: generation llama 128x256: /" \
      | tee -a "$WORK/summary.txt" || say "generation llama 128x256: failed or timed out"
  fi
fi

# 2b. The trainer on its own (benchmarks/train_step.py), each with tokens/s per GPU, peak memory against
#     docs/memory.md's estimate, and MFU: FSDP2 (fully_shard over this one GPU: every layer gathered in bf16
#     and freed, gradients reduced in fp32) on 2 x 4,096 tokens, and one 16,384-token sequence with
#     activation checkpointing; Qwen2.5-0.5B's whole shape (its 151,936-token vocabulary included), on MODEL
#     where given. TRAIN_STEP=0 skips them; a rehearsal runs them only with TRAIN_STEP=1 (their CPU
#     rehearsal is a test of its own, tests/test_gpu_example.py).
TRAIN_STEP=${TRAIN_STEP:-$([[ "$REHEARSE" == 1 ]] && echo 0 || echo 1)}
if [[ "$TRAIN_STEP" != 0 ]]; then
  if [[ "$REHEARSE" == 1 ]]; then
    TS_ARGS=(--device cpu --shape tiny) FSDP_ROWS=(--seq 64 --rows 2) LONG_ROWS=(--seq 256 --rows 1)
  else
    TS_ARGS=(--device cuda --shape qwen2.5-0.5b) FSDP_ROWS=(--seq 4096 --rows 2) LONG_ROWS=(--seq 16384 --rows 1)
  fi
  [[ -n "$MODEL_GIVEN" ]] && TS_ARGS+=(--model "$MODEL")
  for step in fsdp long_context; do
    (( $(left) > 300 )) || { say "train step $step: skipped (time)"; continue; }
    if [[ "$step" == fsdp ]]; then STEP_ARGS=(--fsdp "${FSDP_ROWS[@]}"); else STEP_ARGS=(--checkpointing "${LONG_ROWS[@]}"); fi
    timeout 150 "$PYTHON" benchmarks/train_step.py "${TS_ARGS[@]}" "${STEP_ARGS[@]}" --label "train step $step" \
      --json "$WORK/train_step.jsonl" 2>>"$WORK/errors.log" | sed "s/^/gpu_smoke: /" | tee -a "$WORK/summary.txt" \
      || { say "train step $step: failed or timed out; the end of errors.log:"; tail -5 "$WORK/errors.log"; }
  done
fi

# 3. A few GRPO steps.
if [[ ! -f "$MODEL/config.json" ]]; then
  shape=$([[ "$REHEARSE" == 1 ]] && echo tiny || echo qwen2.5-0.5b)
  MODEL=$WORK/train-$shape
  [[ -f "$MODEL/config.json" ]] || "$PYTHON" benchmarks/make_model.py --arch qwen2 --shape "$shape" --out "$MODEL" >/dev/null 2>&1 \
    || die "could not make a model in the $shape shape"
  say "training random weights in the $shape shape (bundled tokenizer): tokens/s and memory are real, rewards are not"
fi
BACKEND=vllm
"$PYTHON" -c "import vllm" 2>/dev/null || { BACKEND=hf; say "no vLLM here: sampling with policy.backend hf on the $DEVICE"; }
SANDBOX=bwrap
if ! "$PYTHON" -m trialground sandbox run --json -- python3 -c "print(6 * 7)" 2>/dev/null | grep -q '"stdout": "42'; then
  SANDBOX=process
  say "WARNING: no bubblewrap sandbox starts here: grading runs with sandbox.backend process (NO isolation)"
fi
say "training: $MODEL, policy.backend $BACKEND, sandbox.backend $SANDBOX, $(left) s left"
set +e
timeout --signal=INT "$(left)" "$PYTHON" -m trialground train examples/gpu_humaneval.yaml \
  --set "policy.model=$MODEL" \
  --set "loop.steps=$STEPS" \
  --set loop.eval_interval=0 \
  --set "tasks.eval_sources=[{source: humaneval, limit: $EVAL_TASKS}]" \
  --set "output_dir=$RUNS" \
  --set "name=$NAME" \
  --set "policy.backend=$BACKEND" \
  --set "sandbox.backend=$SANDBOX" \
  "${TRAIN_ARGS[@]}"
STATUS=$?
set -e
[[ -n "$SAMPLER" ]] && kill "$SAMPLER" 2>/dev/null || true
RUN_DIR="$RUNS/$NAME"
echo
say "trialground train exited $STATUS after $(($(date +%s) - START))s in all (run directory $RUN_DIR)"
if [[ -f "$RUN_DIR/metrics.jsonl" ]]; then
  "$PYTHON" - "$RUN_DIR/metrics.jsonl" "$MEM_LOG" <<'PY' | tee -a "$WORK/summary.txt"
import json
import sys

steps = [m for m in map(json.loads, open(sys.argv[1])) if "train/tokens_per_s" in m]
if not steps:
    sys.exit("gpu_smoke: no training step finished")
# Every step's samples are one batch (rollout_concurrency >= batch_tasks x samples_per_task), so the
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
else
  say "no metrics.jsonl: the run did not get to its first step"
  [[ "$STATUS" != 0 ]] || STATUS=1
fi
# 4. Generation by a fleet of servers, the bucketed push, the mismatch metrics and, where vLLM is
#    installed, its native NCCL weight transfer (scripts/gpu_fleet_smoke.sh; FLEET=0 skips it; by default
#    it runs on the GPU when 150 s are left, never in a rehearsal).
FLEET=${FLEET:-$([[ "$REHEARSE" == 1 ]] && echo 0 || echo 1)}
if [[ "$FLEET" == 1 ]] && (( $(left) > 150 )); then
  DEVICE=$DEVICE SMOKE_WORK=$WORK PYTHON=$PYTHON timeout "$(left)" scripts/gpu_fleet_smoke.sh \
    || say "fleet smoke failed or timed out (its summary: $WORK/fleet/summary.txt)"
elif [[ "$FLEET" == 1 ]]; then
  say "fleet smoke: skipped (time); run scripts/gpu_fleet_smoke.sh on its own"
fi
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
  cp "$WORK/summary.txt" "$WORK/errors.log" "$WORK"/generation-*.json "$WORK"/train_step.jsonl "$OUT"/ 2>/dev/null || true
  [[ -f "$RUN_DIR/metrics.jsonl" ]] && cp "$RUN_DIR/metrics.jsonl" "$OUT/" || true
fi
exit "$STATUS"
