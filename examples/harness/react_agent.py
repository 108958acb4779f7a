#!/usr/bin/env python3
"""A ReAct-style agent written with the `openai` SDK and nothing of trialground's.

It reads its task from TRIALGROUND_PROMPT (or standard input), talks to the model at OPENAI_BASE_URL with
OPENAI_API_KEY, runs the tools the model calls itself (in the current directory), feeds their output back
as `tool` messages, and stops when the model calls `submit` (an `answer` goes to TRIALGROUND_ANSWER_FILE,
when set) or after --max-turns model calls. Point it at any OpenAI-compatible server:

    OPENAI_BASE_URL=http://localhost:8001/v1 OPENAI_API_KEY=x python react_agent.py "Fix solution.py"

The tool descriptions in the first message are the ones trialground's bundled agent policy was trained
with, so that policy can drive this program; a model that reads `tools=` gets them as schemas too.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

from openai import OpenAI

TOOL_TEXT = """Tools (one or more calls per message):
- bash(command): run a bash script in /workspace
- python(code): run Python code in /workspace
- read_file(path): show a file
- write_file(path, content): create or overwrite a file
- edit_file(path, old, new): replace the one exact occurrence of `old` with `new`
- run_tests(): run the visible tests
- submit(answer?): finish; the workspace (or `answer`) is graded"""
EXAMPLE = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'

PARAMS = {
    "bash": ["command"],
    "python": ["code"],
    "read_file": ["path"],
    "write_file": ["path", "content"],
    "edit_file": ["path", "old", "new"],
    "run_tests": [],
    "submit": [],
}
OPTIONAL = {"submit": ["answer"]}

# Runs the test_* functions of the test files here with the standard library alone.
TEST_RUNNER = r"""
import importlib.util, inspect, os, sys, traceback
sys.dont_write_bytecode = True
sys.path.insert(0, os.getcwd())
passed = failed = 0
for path in sys.argv[1:]:
    try:
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    except BaseException:
        failed += 1
        print(f"ERROR {path} (collecting)")
        traceback.print_exc(limit=-2, file=sys.stdout)
        continue
    for name, fn in list(vars(mod).items()):
        if not name.startswith("test") or not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
            continue
        try:
            fn()
        except BaseException as e:
            failed += 1
            print(f"FAILED {path}::{name}: {type(e).__name__}: {e}")
            traceback.print_exc(limit=-2, file=sys.stdout)
        else:
            passed += 1
            print(f"PASSED {path}::{name}")
print(f"{passed} passed, {failed} failed")
sys.exit(0 if passed and not failed else 1)
"""


def schemas() -> list[dict]:
    out = []
    for name, required in PARAMS.items():
        props = {p: {"type": "string"} for p in required + OPTIONAL.get(name, [])}
        params = {"type": "object", "properties": props, "required": required}
        out.append({"type": "function", "function": {"name": name, "parameters": params}})
    return out


def shorten(text: str, budget: int) -> str:
    if len(text) <= budget:
        return text
    marker = f"\n[... {len(text) - budget} chars cut ...]\n"
    keep = max(0, budget - len(marker))
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2) :]


def run(argv: list[str], stdin: str | None = None, timeout: float = 5.0) -> str:
    try:
        res = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "[timeout]"
    parts = [f"[exit {res.returncode}]"]
    if res.stdout:
        parts.append(res.stdout.rstrip("\n"))
    if res.stderr:
        parts.append("[stderr]\n" + res.stderr.rstrip("\n"))
    return "\n".join(parts)


def call_tool(name: str, args: dict, timeout: float) -> tuple[str, bool, str | None]:
    """(output, submitted, answer)."""
    if name not in PARAMS:
        return f"error: unknown tool {name!r}", False, None
    missing = [p for p in PARAMS[name] if not isinstance(args.get(p), str)]
    if missing:
        return f"error: {name} needs {', '.join(missing)}", False, None
    if name == "bash":
        return run(["bash", "-c", args["command"]], timeout=timeout), False, None
    if name == "python":
        return run([sys.executable, "-B", "-"], stdin=args["code"], timeout=timeout), False, None
    if name == "read_file":
        try:
            with open(args["path"], encoding="utf-8", errors="replace") as f:
                return f.read(), False, None
        except OSError as e:
            return f"error: cannot read {args['path']}: {e.strerror}", False, None
    if name == "write_file":
        try:
            with open(args["path"], "w", encoding="utf-8") as f:
                f.write(args["content"])
        except OSError as e:
            return f"error: cannot write {args['path']}: {e.strerror}", False, None
        return f"wrote {len(args['content'])} chars to {args['path']}", False, None
    if name == "edit_file":
        try:
            with open(args["path"], encoding="utf-8") as f:
                text = f.read()
        except OSError:
            return f"error: cannot edit {args['path']}: no such file", False, None
        count = text.count(args["old"]) if args["old"] else 0
        if count != 1:
            why = "not found" if count == 0 else f"ambiguous: {count} matches"
            return f"error: `old` text {why} in {args['path']}; nothing changed", False, None
        with open(args["path"], "w", encoding="utf-8") as f:
            f.write(text.replace(args["old"], args["new"], 1))
        return f"edited {args['path']} (1 replacement)", False, None
    if name == "run_tests":
        tests = sorted(glob.glob("test_*.py") + glob.glob("tests/test_*.py"))
        if not tests:
            return "this task has no visible tests", False, None
        return run([sys.executable, "-B", "-c", TEST_RUNNER, *tests], timeout=timeout), False, None
    answer = args.get("answer")
    return "submitted", True, answer if isinstance(answer, str) else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt", nargs="?", help="the task (default: TRIALGROUND_PROMPT, else stdin)")
    ap.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "policy"))
    ap.add_argument("--max-turns", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--observation-chars", type=int, default=1000)
    ap.add_argument("--tool-timeout", type=float, default=5.0)
    opts = ap.parse_args()
    prompt = opts.prompt or os.environ.get("TRIALGROUND_PROMPT") or sys.stdin.read()
    client = OpenAI(max_retries=0, timeout=600)
    messages: list[dict] = [
        {"role": "user", "content": f"{prompt}\n\n{TOOL_TEXT}\nCall a tool like this:\n{EXAMPLE}"}
    ]
    extra = {
        k: v for k, v in (("max_tokens", opts.max_tokens), ("temperature", opts.temperature)) if v is not None
    }
    for _ in range(opts.max_turns):
        reply = client.chat.completions.create(model=opts.model, messages=messages, tools=schemas(), **extra)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            messages.append(
                {
                    "role": "user",
                    "content": "error: no tool call found; call a tool (see the list above) or submit",
                }
            )
            continue
        for i, call in enumerate(message.tool_calls):
            if i >= 1:  # one call per message, as the bundled policy was trained
                output, done, answer = "error: only 1 tool calls per message; rest ignored", False, None
            else:
                try:
                    args = json.loads(call.function.arguments or "{}")
                except json.JSONDecodeError:
                    args = None
                if not isinstance(args, dict):
                    output, done, answer = "error: arguments are not a JSON object", False, None
                else:
                    output, done, answer = call_tool(call.function.name, args, opts.tool_timeout)
            if done:
                target = os.environ.get("TRIALGROUND_ANSWER_FILE")
                if answer is not None and target:
                    with open(target, "w", encoding="utf-8") as f:
                        f.write(answer)
                return 0
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": shorten(output, opts.observation_chars)}
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
