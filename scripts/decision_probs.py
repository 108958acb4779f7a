"""How sure a policy is at each decision of a repair episode: the probability it gives each next call.

    .venv/bin/python scripts/decision_probs.py tiny-fix --n 6
    .venv/bin/python scripts/decision_probs.py runs/swe_fixes_cpu/checkpoints/step_8/hf --n 6

The scripted repair player (`trialground.rollout.swe_fixer.play_fixes`) plays the first `--n` held-out
tasks of `examples/swe_fixes_cpu.yaml` through the real environment (list the candidates, apply one, run
the suite, the next while it fails, submit; with `--next-fix` it calls `apply_fix()` for the next). For
every turn of those episodes the policy is given the episode so far, rendered token for token as a
rollout renders it, and the script prints the probability of the call the player made and of the other
calls a repair episode chooses between (`fixes`, `apply_fix()`, `apply_fix(1..6)`, `run_tests`,
`submit`): each the probability of generating exactly that call and the end of the turn. A
reinforcement-learning recipe can only change what the policy samples where it is unsure; this shows
where that is (docs/swe.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from trialground.envs.toolcalls import format_tool_call
from trialground.rollout.chat import ChatRenderer

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "swe_fixes_cpu.yaml"
Trace = dict[str, Any]


def repair_calls() -> list[str]:
    """The calls a repair episode chooses between, as the policy writes them."""
    calls = [
        format_tool_call(name, {}, "json_tags") for name in ("fixes", "run_tests", "submit", "apply_fix")
    ]
    return calls + [format_tool_call("apply_fix", {"n": str(k)}, "json_tags") for k in range(1, 7)]


def decision_probs(model: Any, tok: Any, trace: Trace, calls: list[str]) -> list[dict[str, float]]:
    """For each turn of `trace` ({"prompt", "turns": [[action, observation], ...]}), the probability the
    model gives each of `calls` and the action taken, after the episode up to that turn."""
    renderer = ChatRenderer(tok)
    context = renderer.prompt_ids([{"role": "user", "content": trace["prompt"]}])
    out: list[dict[str, float]] = []
    for action, observation in trace["turns"]:
        options = list(dict.fromkeys([action, *calls]))
        owns = [[*tok.encode(o, add_special_tokens=False), tok.eos_token_id] for o in options]
        width = len(context) + max(len(own) for own in owns)
        ids = torch.full((len(options), width), tok.pad_token_id or 0, dtype=torch.long)
        for row, own in enumerate(owns):
            ids[row, : len(context) + len(own)] = torch.tensor(context + own)
        with torch.no_grad():
            logp = model(ids).logits.float().log_softmax(-1)
        turn: dict[str, float] = {}
        for row, (option, own) in enumerate(zip(options, owns, strict=True)):
            at = torch.arange(len(own)) + len(context) - 1
            turn[option] = math.exp(logp[row, at, torch.tensor(own)].sum().item())
        out.append(turn)
        own = owns[0]
        context = context + own + renderer.observation_ids(observation, role="user", after=own)
    return out


async def _play(n: int, tries: int, next_fix: bool) -> list[Trace]:
    from trialground.envs.tool_env import ToolEnv
    from trialground.integrations.grading import resolve_tasks
    from trialground.orchestrator.run_config import load_config
    from trialground.rollout.swe_fixer import play_fixes
    from trialground.verify.grader import make_grader

    config = load_config(RECIPE)
    source = config.tasks.sources[0].source
    tasks = resolve_tasks(source, seed=config.seed, split="eval")[:n]
    grader = make_grader(config.sandbox, config.reward)
    traces = []
    try:
        for task in tasks:
            env = ToolEnv(grader, config.env, config.sandbox)
            try:
                traces.append(await play_fixes(env, task, tries=tries, next_fix=next_fix))
            finally:
                await env.close()
    finally:
        await grader.close()
    return traces


def _short(call: str) -> str:
    body = json.loads(call.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    args = ",".join(str(v) for v in body["arguments"].values())
    return f"{body['name']}({args})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a model directory or a bundled policy name (tiny-fix)")
    ap.add_argument("--n", type=int, default=6, help="held-out tasks played")
    ap.add_argument("--tries", type=int, default=3, help="candidates the player tries at most")
    ap.add_argument(
        "--next-fix",
        action="store_true",
        help="the player calls apply_fix() without a number (the next candidate)",
    )
    ap.add_argument("--traces", type=Path, help="reuse (or write) the player's episodes as JSON here")
    args = ap.parse_args()
    from trialground.policy.tiny import resolve_model_dir

    if args.traces is not None and args.traces.is_file():
        traces = json.loads(args.traces.read_text())
    else:
        traces = asyncio.run(_play(args.n, args.tries, args.next_fix))
        if args.traces is not None:
            args.traces.write_text(json.dumps(traces))
    where = resolve_model_dir(args.model)
    tok = AutoTokenizer.from_pretrained(where)
    model = LlamaForCausalLM.from_pretrained(where).eval()
    calls = repair_calls()
    for trace in traces:
        print(f"== solved {trace['solved']}, tried {trace['tried']} of {trace['listed']} listed")
        for i, ((action, observation), probs) in enumerate(
            zip(trace["turns"], decision_probs(model, tok, trace, calls), strict=True)
        ):
            top = sorted(probs.items(), key=lambda kv: -kv[1])[:3]
            shown = ", ".join(f"{_short(c)} {p:.3f}" for c, p in top)
            print(f"  turn {i}: played {_short(action)} p={probs[action]:.3f} | top: {shown}")
            print(f"          -> {observation.splitlines()[0][:70] if observation else ''}")


if __name__ == "__main__":
    main()
