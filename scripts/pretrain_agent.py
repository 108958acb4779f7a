"""Pre-train a bundled agent policy on multi-turn tool traces.

    .venv/bin/python scripts/pretrain_agent.py                      # tiny-nav, stage 1, ~90 min
    .venv/bin/python scripts/pretrain_agent.py --init-from trialground/policy/tiny_nav --seed 2 \
        --traces 1200 --longctx-traces 1200 --answer-revise clean --shortcut 0.5 --eval-every 40 \
        --fine-from 2 --max-steps 120 --target 1.1 --longctx-target 1.1 \
        --cache /tmp/tg_nav_stage2.jsonl                              # tiny-nav, stage 2, ~17 min
    .venv/bin/python scripts/pretrain_agent.py --longctx-traces 0   # tiny-agent, ~10-20 min
    .venv/bin/python scripts/pretrain_agent.py --init-from trialground/policy/tiny_nav --seed 4 \
        --swe inflection:140:brief --swe-tasks 39 --swe-repeats 8 --revise 0.3 --noise 0.1 \
        --redundant 0.2 --answer-revise clean --max-steps 120 --eval-every 60 --fine-every 60 \
        --target 1.1 --threads 2 --out /tmp/tiny-swe      # repository demonstrations, ~25 min (docs/swe.md)
    .venv/bin/python scripts/pretrain_agent.py --init-from trialground/policy/tiny_nav --seed 4 \
        --swe inflection:140:brief --swe-line-fixes --swe-tasks 36 --swe-repeats 8 --redundant 0.2 \
        --answer-revise clean --max-steps 120 --eval-every 60 --fine-every 60 --target 1.1 --threads 2 \
        --out /tmp/tiny-swe-sed                           # repairs as line-addressed sed, ~23 min

on 2 CPU cores. `tiny-agent` is trained on the `agent` families alone, `tiny-nav` on those and the
long-context families, then continued for 120 steps on new traces whose answers are right and half of
whose long-context traces play the family's shortcut (`--shortcut`, `families/longctx`): the
policy follows references better and keeps a habit of skipping them, which the long-context recipe's
reinforcement learning removes.

Recipe:
1. Traces. For train-split instances of the `agent` families (trialground.families.agent.source) and of the
   long-context families (trialground.families.longctx.source: search, paged reads, following a reference), a
   scripted expert plays real episodes in a real `ToolEnv` with each recipe's environment and sandbox
   settings (examples/agent.yaml, examples/longctx_cpu.yaml), so every observation is exactly what the
   environment prints. The expert reacts to
   what it reads (after a failing check it fixes and checks again), and some traces are made imperfect on
   purpose: `--revise` of them first make a wrong edit and repair it after reading the failure (where the
   decisive call is an edit; where it is the answer, which ends the episode, `--answer-revise wrong`, the
   default and how the bundled policies were made, submits a wrong answer and `clean` plays the trace
   right), `--noise` submit a wrong result, `--redundant` repeat an action that changes nothing. So the
   model has seen revising, is never sure of its edits, and carries habits the efficiency reward can remove.
2. A byte-level BPE tokenizer (trialground.policy.tiny) fitted on the traces' text.
3. A small Llama trained on the token-exact episode ids (rendered with `ChatRenderer`, as rollouts are),
   with the loss on the policy's turns only: observations are masked as in RL.
4. Pre-training stops early: every `--eval-every` steps the greedy solve rate on held-out (eval-split)
   instances is measured with the real pipeline (`evaluate_run` on each recipe with the candidate model;
   selection instances from another seed than the recipes' eval tasks), and training stops at the first
   checkpoint at or above `--target` on the agent recipe and `--longctx-target` on the long-context one,
   where sampling still solves tasks greedy decoding misses.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import dataclasses
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import torch
from transformers import LlamaForCausalLM

from trialground.envs.tool_env import ToolEnv
from trialground.envs.toolcalls import format_tool_call
from trialground.families.agent.source import agent_instances
from trialground.families.longctx.source import longctx_instances
from trialground.orchestrator.run_config import RunConfig, load_config
from trialground.policy.tiny import AGENT_NAME, NAV_NAME, build_tokenizer, tiny_llama_config, tiny_model_dir
from trialground.rollout.chat import ChatRenderer
from trialground.tasks.model import Task
from trialground.verify.grader import make_grader

RECIPE = Path(__file__).resolve().parent.parent / "examples" / "agent.yaml"
LONGCTX_RECIPE = RECIPE.with_name("longctx_cpu.yaml")
SWE_RECIPE = RECIPE.with_name("swe_cpu.yaml")
SWE_FIXES_RECIPE = RECIPE.with_name("swe_fixes_cpu.yaml")
Trace = dict[str, Any]  # {"prompt": str, "turns": [[action, observation], ...], "solved": bool}


class Instance(Protocol):
    """A task and the expert's calls that solve it (`agentic.Instance`, `longctx.Instance`)."""

    @property
    def family(self) -> str: ...
    @property
    def task(self) -> Task: ...
    @property
    def expert(self) -> tuple[tuple[str, dict[str, str]], ...]: ...


def _bump_digit(text: str, rng: random.Random) -> str:
    spots = [i for i, ch in enumerate(text) if ch.isdigit()]
    if not spots:
        return text + "1"
    i = rng.choice(spots)
    return text[:i] + rng.choice([d for d in "0123456789" if d != text[i]]) + text[i + 1 :]


def _wrong(name: str, args: dict[str, str], rng: random.Random) -> dict[str, str]:
    """A plausible but wrong version of the decisive call (the edit, or the answer)."""
    out = dict(args)
    if name == "write_file":
        head, _, body = out["content"].partition("\n")
        out["content"] = head + "\n" + _bump_digit(body, rng)
    elif name == "edit_file":
        key, _, value = out["new"].partition(" = ")
        if not value:  # a key's spelling: misspell it another way
            out["new"] = key[:-3] + key[-2:]
        elif value.isdigit():
            out["new"] = f"{key} = {_bump_digit(value, rng)}"
        else:
            out["new"] = f"{key} = {value[:-1]}"
    elif name == "submit" and "answer" in out:
        out["answer"] = _bump_digit(out["answer"], rng)
    return out


async def play(inst: Instance, env: ToolEnv, rng: random.Random, args: argparse.Namespace) -> Trace:
    """One expert episode. The decisive call is the one that changes the workspace or answers."""
    obs = await env.reset(inst.task)
    trace: Trace = {"prompt": obs.text, "turns": [], "family": inst.family}
    plan = list(inst.expert)
    shortcut = getattr(inst, "shortcut", ())  # long-context instances have one, agent instances none
    if args.shortcut and shortcut and rng.random() < args.shortcut:
        plan = list(shortcut)  # the family's shortcut, played as it is (trace["shortcut"] says so)
        trace["shortcut"] = True
    decisive = next(
        i
        for i, (n, a) in enumerate(plan)
        if n in ("write_file", "edit_file") or "answer" in a or a.get("command", "").startswith("sed -i")
    )
    mode = rng.random()
    revise, fail = mode < args.revise, args.revise <= mode < args.revise + args.noise
    if trace.get("shortcut"):
        revise = fail = False
    if revise and plan[decisive][0] == "submit" and args.answer_revise == "clean":
        # The answer ends the episode, so nothing can be revised after it: a "revised" trace would only
        # teach a wrong answer (a digit changed), on top of the `--noise` share that does so on purpose.
        revise = False
    if rng.random() < args.redundant:  # a repeat that changes nothing: the efficiency reward's target
        at = rng.randrange(decisive) if decisive > 0 else 0
        plan.insert(at + 1, plan[at])
        decisive += 1 if at < decisive else 0
    queue = [(n, dict(a)) for n, a in plan]
    wrong = getattr(inst, "wrong", "generic")  # repository demonstrations carry their own (or None)
    if wrong is None:
        revise = fail = False
    if revise or fail:
        name, good = queue[decisive]
        queue[decisive] = (name, _wrong(name, good, rng) if wrong == "generic" else dict(wrong))
        if revise and name != "submit":
            check = queue[decisive + 1]  # the check after the edit shows the failure; then fix, check again
            fix = good if name == "write_file" else {**good, "old": queue[decisive][1]["new"]}
            queue[decisive + 2 : decisive + 2] = [(name, fix), check]
    for name, call_args in queue:
        text = format_tool_call(name, call_args, "json_tags")
        obs = await env.step(text)
        trace["turns"].append([text, obs.text])
        if obs.done:
            break
    graded = obs.end.graded if obs.done and obs.end is not None else None
    trace["solved"] = bool(graded is not None and graded.verdict.passed and graded.verdict.error is None)
    return trace


def shift_lines(demo: Any, most: int, rng: random.Random) -> Any:
    """A line-fix demonstration (`--swe-line-fixes`) with up to `most` blank lines put into its workspace
    between the start of the page it reads and the bug, so the line its `sed` addresses moves by as many:
    the policy must read the number off the page instead of recalling it. The blank lines must leave the
    program's syntax tree unchanged (never inside a string); else the demonstration is kept as it is."""
    calls = list(demo.expert)
    at = next(
        (i for i, (n, a) in enumerate(calls) if n == "bash" and a["command"].startswith("sed -i")), None
    )
    page = next((a for n, a in calls if n == "read_lines"), None)
    if at is None or page is None:
        return demo
    command = calls[at][1]["command"]
    line = int(re.match(r"sed -i -E '(\d+)s/", command).group(1))  # type: ignore[union-attr]
    start = int(page["start"])
    room = start + int(page["count"]) - 1 - line  # the bug stays on the page
    path = page["path"]
    text = demo.task.files[path]
    lines = text.split("\n")
    want = ast.dump(ast.parse(text))
    for _ in range(8):
        k = rng.randint(0, max(0, min(most, room)))
        where = rng.randint(start, line)  # the blank lines go before this line
        new = "\n".join([*lines[: where - 1], *[""] * k, *lines[where - 1 :]])
        if k and ast.dump(ast.parse(new)) == want:
            calls[at] = ("bash", {"command": command.replace(f"'{line}s/", f"'{line + k}s/", 1)})
            task = Task(**{**demo.task.model_dump(), "id": "", "files": {**demo.task.files, path: new}})
            return dataclasses.replace(demo, task=task, expert=tuple(calls))
    return demo


async def make_traces(
    config: RunConfig, instances: list[Any], seed: int, args: argparse.Namespace
) -> list[Trace]:
    grader = make_grader(config.sandbox, config.reward)
    gate = asyncio.Semaphore(8)
    rng = random.Random(seed)
    seeds = [rng.random() for _ in instances]

    async def one(inst: Instance, s: float) -> Trace:
        async with gate:
            env = ToolEnv(grader, config.env, config.sandbox)
            try:
                return await play(inst, env, random.Random(s), args)
            finally:
                await env.close()

    try:
        return list(await asyncio.gather(*(one(i, s) for i, s in zip(instances, seeds, strict=True))))
    finally:
        await grader.close()


async def fixes_traces(args: argparse.Namespace, rng: random.Random) -> list[Trace]:
    """`--swe-fixes`: each of the first `--swe-tasks` train tasks played once by the full repair strategy
    and once by its shortcut (`trialground.rollout.swe_fixer`; both are deterministic), then `--swe-repeats`
    traces per task, each the shortcut with probability `--shortcut`."""
    from trialground.integrations.grading import resolve_tasks
    from trialground.rollout.swe_fixer import play_fixes

    config = load_config(SWE_FIXES_RECIPE)
    tasks = resolve_tasks(f"swe:{args.swe}", seed=config.seed, split="train")[: args.swe_tasks]
    grader = make_grader(config.sandbox, config.reward)
    gate = asyncio.Semaphore(4)

    async def one(task: Task, shortcut: bool) -> Trace:
        async with gate:
            env = ToolEnv(grader, config.env, config.sandbox)
            try:
                return await play_fixes(
                    env, task, tries=args.swe_tries, shortcut=shortcut, next_fix=args.next_fix
                )
            finally:
                await env.close()

    try:
        played = await asyncio.gather(*(one(t, s) for t in tasks for s in (False, True)))
    finally:
        await grader.close()
    pairs = [played[i : i + 2] for i in range(0, len(played), 2)]
    return [pair[rng.random() < args.shortcut] for _ in range(args.swe_repeats) for pair in pairs]


def encode(tok: Any, trace: Trace, max_len: int) -> tuple[list[int], list[int]] | None:
    """Episode ids as the rollout builds them, and labels (-100 outside the policy's turns)."""
    renderer = ChatRenderer(tok)
    ids = renderer.prompt_ids([{"role": "user", "content": trace["prompt"]}])
    labels = [-100] * len(ids)
    turns = trace["turns"]
    for i, (action, observation) in enumerate(turns):
        own = [*tok.encode(action, add_special_tokens=False), tok.eos_token_id]
        ids += own
        labels += own
        if i + 1 < len(turns):
            obs_ids = renderer.observation_ids(observation, role="user", after=own)
            ids += obs_ids
            labels += [-100] * len(obs_ids)
    return (ids, labels) if len(ids) <= max_len else None


def batch(examples: list[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(i) for i, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)
    for r, (i, lab) in enumerate(examples):
        ids[r, : len(i)] = torch.tensor(i)
        labels[r, : len(lab)] = torch.tensor(lab)
    return ids, labels


def solve_rates(
    model: Any, tok: Any, recipe: Path, n: int, samples: int, *, reseed: bool = True
) -> dict[str, float]:
    """Held-out solve rates of the candidate, measured by the recipe's own evaluation (real episodes);
    `reseed`: on instances drawn with another seed than the recipe's (generated families), else on the
    recipe's own eval split (a built task set such as the repository tasks)."""
    from trialground.orchestrator.evaluate_run import evaluate_run

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        overrides = [f"policy.model={tmp}", f"tasks.num_eval={n}", "tasks.num_train=1"]
        overrides += ["tasks.seed=777"] if reseed else []
        metrics = asyncio.run(evaluate_run(load_config(recipe, overrides), samples=samples))
    model.train()
    keep = ("eval/pass@1", "eval_sampled/pass@1", f"eval_sampled/pass@{samples}")
    return {k: round(v, 4) for k, v in metrics.items() if k in keep or k.startswith("eval/pass@1/")}


def both_rates(model: Any, tok: Any, args: argparse.Namespace, samples: int) -> dict[str, float]:
    """The agent recipe's rates as they are, the long-context recipe's under `longctx/`; with `--swe`,
    the repository recipe's held-out split alone, under `swe/`."""
    if args.swe:
        recipe = SWE_FIXES_RECIPE if args.swe_fixes else SWE_RECIPE
        swe = solve_rates(model, tok, recipe, args.swe_eval_n, samples, reseed=False)
        return {"eval/pass@1": swe["eval/pass@1"], **{f"swe/{k}": v for k, v in swe.items()}}
    agent = solve_rates(model, tok, RECIPE, args.eval_n, samples)
    if not args.longctx_traces:
        return agent
    longctx = solve_rates(model, tok, LONGCTX_RECIPE, args.longctx_eval_n, samples)
    return {**agent, **{f"longctx/{k}": v for k, v in longctx.items()}}


def reached(stats: dict[str, float], args: argparse.Namespace) -> bool:
    return stats["eval/pass@1"] >= args.target and (
        args.swe or not args.longctx_traces or stats["longctx/eval/pass@1"] >= args.longctx_target
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--out", type=Path, default=None, help="default: tiny-nav (tiny-agent with --longctx-traces 0)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--traces", type=int, default=6000)
    ap.add_argument(
        "--cache", type=Path, default=None, help="traces file, reused when it exists (default: "
        "/tmp/tg_agent_traces.jsonl, /tmp/tg_swe_traces.jsonl with --swe)",
    )  # fmt: skip
    ap.add_argument("--revise", type=float, default=0.25, help="traces: wrong edit, then repair")
    ap.add_argument("--noise", type=float, default=0.1, help="traces that submit a wrong result")
    ap.add_argument(
        "--answer-revise",
        choices=("wrong", "clean"),
        default="wrong",
        help="a --revise trace whose decisive call is the answer (nothing follows it): submit a wrong "
        "answer (how the bundled policies were made) or play it right",
    )
    ap.add_argument("--redundant", type=float, default=0.3, help="traces with one repeated, useless call")
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--max-steps", type=int, default=4000)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-n", type=int, default=96, help="held-out instances used to decide when to stop")
    ap.add_argument("--target", type=float, default=0.3, help="stop at the first greedy solve rate >= this")
    ap.add_argument("--longctx-traces", type=int, default=2400, help="long-context traces (0: none)")
    ap.add_argument("--longctx-eval-n", type=int, default=48)
    ap.add_argument(
        "--shortcut", type=float, default=0.0, help="share of long-context traces that play the family's "
        "shortcut (families/longctx: a plausible way to answer that skips following the reference, "
        "wrong unless by chance): a habit the long-context recipe's reinforcement learning corrects",
    )  # fmt: skip
    ap.add_argument("--longctx-target", type=float, default=0.25, help="and long-context solve rate >= this")
    ap.add_argument(
        "--fine-from", type=float, default=0.03, help="evaluate every --fine-every steps from here"
    )
    ap.add_argument("--fine-every", type=int, default=10)
    ap.add_argument(
        "--swe", default=None, help="a repository task set (e.g. inflection:140:brief): pre-train on "
        "demonstrations of its train split (trialground.tasks.swe.brief) alone, evaluated by "
        "examples/swe_cpu.yaml on its held-out split; use with --init-from and --out",
    )  # fmt: skip
    ap.add_argument("--swe-repeats", type=int, default=6, help="demonstrations per train task")
    ap.add_argument(
        "--swe-tasks", type=int, default=None, help="demonstrate only the first N train tasks (the rest "
        "are left for reinforcement learning to discover)",
    )  # fmt: skip
    ap.add_argument(
        "--swe-line-fixes",
        action="store_true",
        help="repair with a sed command addressed by line number (trialground.tasks.swe.line_fix) instead "
        "of edit_file; only tasks whose fix fits one of its bug kind's patterns are demonstrated",
    )
    ap.add_argument(
        "--swe-shift",
        type=int,
        default=0,
        help="with --swe-line-fixes: put up to N blank lines above each demonstration's bug, on its page, "
        "so the line number its repair addresses varies between repeats (shift_lines)",
    )
    ap.add_argument(
        "--swe-fixes",
        action="store_true",
        help="with --swe: episodes of the scripted repair player through fixes/apply_fix/run_tests "
        "(trialground.rollout.swe_fixer), evaluated by examples/swe_fixes_cpu.yaml; --shortcut of them "
        "apply the top candidate and submit without running the tests",
    )
    ap.add_argument(
        "--final-samples", type=int, default=8, help="sampled episodes per task of the final evaluation "
        "(0: greedy only)",
    )  # fmt: skip
    ap.add_argument("--swe-tries", type=int, default=4, help="with --swe-fixes: candidates tried at most")
    ap.add_argument(
        "--next-fix",
        action="store_true",
        help="with --swe-fixes: the player calls apply_fix() without a number (the next candidate) and, when "
        "the listing runs out, once more to hear that every candidate was applied",
    )
    ap.add_argument("--swe-eval-n", type=int, default=1000, help="held-out repository tasks evaluated")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--init-from",
        type=Path,
        default=None,
        help="continue this trained policy (its tokenizer and weights) instead of starting from scratch",
    )
    args = ap.parse_args()
    if args.out is None:
        if args.swe:
            ap.error("--swe needs --out (a directory for the continued policy)")
        args.out = tiny_model_dir(NAV_NAME if args.longctx_traces else AGENT_NAME)
    if args.cache is None:
        args.cache = Path("/tmp/tg_swe_traces.jsonl" if args.swe else "/tmp/tg_agent_traces.jsonl")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    t0 = time.time()
    config = load_config(RECIPE)

    if args.cache.is_file():
        traces = [json.loads(line) for line in args.cache.read_text().splitlines()]
    elif args.swe and args.swe_fixes:  # the scripted repair player, each train task both ways
        traces = asyncio.run(fixes_traces(args, rng))
        args.cache.write_text("".join(json.dumps(t) + "\n" for t in traces))
    elif args.swe:  # repository demonstrations, each train task played --swe-repeats times
        from trialground.tasks.swe import demonstrations

        demos = demonstrations(args.swe, split="train", line_fixes=args.swe_line_fixes)
        demos = demos[: args.swe_tasks] * args.swe_repeats
        if args.swe_shift:
            demos = [shift_lines(d, args.swe_shift, rng) for d in demos]
        traces = asyncio.run(make_traces(load_config(SWE_RECIPE), demos, 1000 + args.seed, args))
        args.cache.write_text("".join(json.dumps(t) + "\n" for t in traces))
    else:
        seed = 1000 + args.seed
        agent = agent_instances(args.traces, seed=seed, split="train")
        traces = asyncio.run(make_traces(config, agent, seed, args))
        if args.longctx_traces:
            longctx = longctx_instances(args.longctx_traces, seed=seed, split="train")
            traces += asyncio.run(make_traces(load_config(LONGCTX_RECIPE), longctx, seed, args))
        args.cache.write_text("".join(json.dumps(t) + "\n" for t in traces))
    solved = sum(t["solved"] for t in traces) / len(traces)
    turns = sum(len(t["turns"]) for t in traces) / len(traces)
    print(f"traces {time.time() - t0:.0f}s: {len(traces)}, solved {solved:.2f}, turns {turns:.1f}")
    for family in sorted({t["family"] for t in traces}):
        of = [t for t in traces if t["family"] == family]
        solved_share, short = sum(t["solved"] for t in of) / len(of), sum(bool(t.get("shortcut")) for t in of)
        print(f"  {family}: {len(of)}, solved {solved_share:.2f}, shortcuts {short}")

    texts = (s for t in traces for s in (t["prompt"], *(x for turn in t["turns"] for x in turn)))
    if args.init_from is not None:  # continue a trained policy: its tokenizer and weights
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(args.init_from))
    else:
        tok = build_tokenizer(texts, args.vocab)
    data = [e for e in (encode(tok, t, args.max_len) for t in traces) if e is not None]
    lens = [len(i) for i, _ in data]
    print(f"encoded {len(data)}/{len(traces)} episodes, ~{sum(lens) / len(lens):.0f} tokens, max {max(lens)}")

    if args.init_from is not None:
        model = LlamaForCausalLM.from_pretrained(str(args.init_from))
    else:
        config_hf = tiny_llama_config(
            len(tok), hidden=args.hidden, layers=args.layers, max_positions=config.policy.max_context_tokens
        )
        config_hf.eos_token_id = tok.eos_token_id
        config_hf.pad_token_id = tok.pad_token_id
        model = LlamaForCausalLM(config_hf)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = 100 if args.init_from is None else 10
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    model.train()
    order: list[int] = []
    stats: dict[str, float] = {}
    prev: tuple[int, dict[str, torch.Tensor], float] | None = None  # (step, weights, solve rate)
    step = 0
    for step in range(1, args.max_steps + 1):
        if len(order) < args.batch:
            order = list(range(len(data)))
            rng.shuffle(order)
        ids, labels = batch([data[order.pop()] for _ in range(args.batch)], tok.pad_token_id)
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f} {time.time() - t0:.0f}s", flush=True)
        every = args.eval_every if stats.get("eval/pass@1", 0.0) < args.fine_from else args.fine_every
        if step % every == 0:
            model.eval()
            stats = both_rates(model, tok, args, samples=0)
            print(f"step {step} {stats} {time.time() - t0:.0f}s", flush=True)
            score = stats["eval/pass@1"]
            if reached(stats, args):
                # the climb is steep: keep whichever of this and the previous checkpoint is closer to target
                if (
                    prev is not None
                    and not args.longctx_traces
                    and args.target - prev[2] < score - args.target
                ):
                    step, state, _ = prev
                    model.load_state_dict(state)
                    print(f"using the step-{step} checkpoint, closer to the target", flush=True)
                break
            prev = (step, {k: v.clone() for k, v in model.state_dict().items()}, score)
    model.eval()
    stats = both_rates(model, tok, args, samples=args.final_samples)
    print(f"final step {step}: {stats}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(args.out, safe_serialization=True)
    tok.save_pretrained(args.out)
    meta = {
        "steps": step,
        "params": n_params,
        "seconds": round(time.time() - t0, 1),
        "traces": {"n": len(traces), "solved": round(solved, 3), "turns_mean": round(turns, 2)},
        "args": {k: str(v) for k, v in vars(args).items() if k not in ("out", "cache")},
        **stats,
    }
    (args.out / "pretrain_stats.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"saved to {args.out} in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
