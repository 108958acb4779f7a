#!/usr/bin/env bash
# Generation by a fleet of servers on one GPU, for the first lent GPU machine (scripts/gpu_smoke.sh runs it
# as its step 4; it runs alone too). It
#   1. starts two `trialground policy serve` processes of the bundled agent model on DEVICE (kernel-picked
#      ports, one API key), the first with `--default-top-k 20`;
#   2. trains STEPS steps of examples/agent.yaml through them (policy.backend remote): episodes routed by
#      prefix to one server each, weights pushed after every step in buckets (policy.weight_bucket_mb) to
#      both, drained around each load; the sampler draws from top_k 20 (policy.sampling.top_k) while the
#      trainer scores the full softmax, with trainer.is_correction token_truncate, so the mismatch metrics
#      and the truncated fraction are real;
#   3. where vLLM is installed, starts `vllm serve` of the same model with the NCCL weight-transfer engine
#      and pushes the trainer's weights to it GPU to GPU (policy.weight_transport vllm_nccl), then compares
#      its logprobs with the trainer's; without vLLM it says so and skips.
# and prints per-step mismatch metrics, each server's requests, loads and pauses. Environment: DEVICE
# (default cuda), STEPS (default 2), PYTHON, SMOKE_WORK (default /tmp/tg-smoke), OUT (copies the summary).
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda}
STEPS=${STEPS:-2}
WORK=${SMOKE_WORK:-/tmp/tg-smoke}/fleet
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$WORK"
: >"$WORK/summary.txt"
say() { echo "gpu_fleet: $*" | tee -a "$WORK/summary.txt"; }
KEY=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
echo "$KEY" >"$WORK/key"
export OPENAI_API_KEY=$KEY
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 2
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

start() {  # start NAME ARGS...: a policy serve process in the background
  local name=$1; shift
  "$PYTHON" -m trialground policy serve --model tiny-agent --device "$DEVICE" --port 0 \
    --api-key-file "$WORK/key" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  PIDS+=($!)
}
url() {  # url NAME: wait (up to 10 minutes) for its first line, `serving URL`
  for _ in $(seq 1 1200); do
    grep -q '^serving ' "$WORK/$1.out" 2>/dev/null && break
    sleep 0.5
  done
  grep -q '^serving ' "$WORK/$1.out" || { say "$1 did not start:"; tail -5 "$WORK/$1.err"; exit 2; }
  awk '/^serving /{print $2; exit}' "$WORK/$1.out"
}
start server-a --default-top-k 20
start server-b
A=$(url server-a)
B=$(url server-b)
say "servers $A (default top_k 20) and $B on $DEVICE"

set +e
"$PYTHON" -m trialground train examples/agent.yaml \
  --set "loop.steps=$STEPS" --set loop.eval_interval=0 --set loop.checkpoint_interval=0 \
  --set loop.batch_tasks=4 --set loop.samples_per_task=4 --set tasks.num_train=40 --set tasks.num_eval=4 \
  --set policy.backend=remote --set "policy.servers=[$A, $B]" --set "policy.device=$DEVICE" \
  --set policy.sampling.top_k=20 --set trainer.is_correction=token_truncate \
  --set policy.weight_bucket_mb=1 --set "output_dir=$WORK/runs" --set name=fleet >"$WORK/train.log" 2>&1
STATUS=$?
set -e
say "train exited $STATUS"
[[ $STATUS == 0 ]] || tail -20 "$WORK/train.log"
"$PYTHON" - "$WORK/runs/fleet/metrics.jsonl" "$A" "$B" <<'PY' | tee -a "$WORK/summary.txt"
import json, os, sys
import httpx
rows = [json.loads(x) for x in open(sys.argv[1]) if x.strip()] if os.path.exists(sys.argv[1]) else []
for m in rows:
    if "train/loss" in m:
        keys = ("mismatch/kl_k3", "mismatch/ratio_p05", "mismatch/ratio_p50", "mismatch/ratio_p95",
                "mismatch/flagged_frac", "train/loss")
        print(f"gpu_fleet: step {m['step']}: " + ", ".join(f"{k} {m.get(k, float('nan')):.4g}" for k in keys))
head = {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}
for url in sys.argv[2:]:
    info = httpx.get(url + "/trialground/info", headers=head).json()
    print(f"gpu_fleet: {url}: requests {info['requests']}, weight loads {info['weight_loads']}, pauses {info['pauses']}")
PY

if "$PYTHON" -c "import vllm" 2>/dev/null; then
  MODEL_DIR=$("$PYTHON" -c "from trialground.policy.tiny import resolve_model_dir; print(resolve_model_dir('tiny-agent'))")
  VLLM_SERVER_DEV_MODE=1 "$PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" --port 8123 \
    --served-model-name tiny-agent --gpu-memory-utilization 0.3 --generation-config vllm \
    --logprobs-mode processed_logprobs --weight-transfer-config '{"backend": "nccl"}' \
    >"$WORK/vllm.out" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 240); do curl -sf http://127.0.0.1:8123/health >/dev/null && break; sleep 1; done
  "$PYTHON" - <<'PY' 2>&1 | tee -a "$WORK/summary.txt" || say "vllm_nccl push failed"
import httpx, torch
from trialground.policy.config import PolicyConfig
from trialground.policy.loading import load_model
from trialground.policy.backends.remote.remote import RemotePolicy
cfg = PolicyConfig(backend="remote", model="tiny-agent", device="cuda", servers=("http://127.0.0.1:8123",),
                   weight_transport="vllm_nccl", weight_bucket_mb=1)
remote = RemotePolicy(cfg)
model = load_model(cfg).float()
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.02 * torch.randn_like(p))
remote.load_weights(model.state_dict(), 1)
prompt = remote.encode_chat([{"role": "user", "content": "List the files."}])
body = {"model": "tiny-agent", "prompt": prompt, "max_tokens": 16, "temperature": 1.0, "top_k": -1,
        "seed": 0, "logprobs": 0, "return_token_ids": True}
choice = httpx.post("http://127.0.0.1:8123/v1/completions", json=body, timeout=120).json()["choices"][0]
ids, served = choice["token_ids"], choice["logprobs"]["token_logprobs"]
with torch.no_grad():
    logits = model(input_ids=torch.tensor([prompt + ids], device="cuda")).logits[0, len(prompt) - 1 : -1].float()
own = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids, device="cuda")[:, None])[:, 0].cpu()
print(f"gpu_fleet: vllm_nccl push: {len(ids)} tokens, max |logprob diff| {float((own - torch.tensor(served)).abs().max()):.3g}")
PY
else
  say "no vLLM here: the native NCCL weight transfer (policy.weight_transport vllm_nccl) was not run"
fi
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
  cp "$WORK/summary.txt" "$OUT/fleet_summary.txt" 2>/dev/null || true
  cp "$WORK/runs/fleet/metrics.jsonl" "$OUT/fleet_metrics.jsonl" 2>/dev/null || true
  tail -50 "$WORK/train.log" >"$OUT/fleet_train_tail.log" 2>/dev/null || true
fi
exit "$STATUS"
