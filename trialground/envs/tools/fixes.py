"""`fixes()`: ranked candidate one-line repairs of a repository task (`trialground.envs.repair`): localized
in the sandbox by its tests, listed on the host."""

from __future__ import annotations

from trialground.envs import navigate, repair
from trialground.envs.tools.base import Deadline, Tool, ToolCall, ToolCaps, ToolOutcome, render_exec
from trialground.tasks.verifiers import lookup


async def run(call: ToolCall) -> ToolOutcome:
    box, limits, task = call.box, call.limits, call.box.task
    if lookup(task.verifier.kind).test_runs is None:
        return ToolOutcome("error: fixes() needs a repository task (its tests localize the bug)", False)
    deadline = Deadline(limits)
    digest = await box.workspace_digest(limits)
    key = (task.id, digest) if digest and task.id else None
    result = repair.LOCALIZED.get(key) if key else None
    if result is None:
        left = deadline.next()
        if left is None:
            return ToolOutcome(f"error: fixes() used its {limits.wall_s:g} s before the tests ran", False)
        argv = [box.python, "-I", "-S", "-c", repair.LOCALIZE_PROGRAM]
        res = await box.exec(argv, navigate.nav_limits(left), stdin=repair.localize_input(task))
        result = repair.parse_result(res.stdout)
        if result is None:
            why = render_exec(res)[-300:]
            return ToolOutcome(f"error: the tests could not be run to localize: {why}", False)
        if key:
            repair.LOCALIZED.put(key, result)
    fixes, skipped = await repair.list_fixes(result.ranked, box.read_text)
    memo = call.memo(repair.RepairMemo)
    memo.fixes, memo.applied = fixes, None
    text = repair.render_fixes(fixes, result.failed, result.passed)
    if skipped:
        text += f"\n(not parsed, over {repair.HOST_PARSE_MAX_BYTES} bytes: {', '.join(skipped)})"
    return ToolOutcome(text, bool(fixes), False)


TOOL = Tool(
    "fixes",
    run,
    ToolCaps(listed=False),
    prompt="numbered candidate one-line fixes at the lines the failing tests point at",
    description="Candidate one-line fixes of a repository task, numbered, at the library lines its failing "
    "tests point at (spectrum-based fault localization over its tests).",
    returns="Numbered candidates as `n. path:line: old -> new`.",
)
