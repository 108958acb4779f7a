"""`apply_fix(n?)`: write candidate `n` of the episode's last `fixes()` listing (`trialground.envs.repair`),
undoing the one applied before it."""

from __future__ import annotations

from trialground.envs import repair
from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam
from trialground.envs.tools.toolbox import FileError


async def run(call: ToolCall) -> ToolOutcome:
    memo = call.memo(repair.RepairMemo)
    fix = repair.choose(memo, call.args.get("n"))
    if isinstance(fix, str):
        return ToolOutcome(f"error: {fix}", False, False)
    new = repair.rewrite(memo, fix, await call.box.read_text(fix.path))
    if new is None:
        return ToolOutcome(
            f"error: {fix.path} changed since fixes() listed it; call fixes() again", False, False, fix.path
        )
    try:
        await call.box.write(fix.path, new.encode("utf-8", errors="surrogateescape"))
    except FileError as e:
        return ToolOutcome(f"error: cannot write {fix.path}: {e}", False, None, fix.path)
    memo.applied = fix
    k = memo.fixes.index(fix) + 1
    return ToolOutcome(f"applied fix {k} at {fix.path}:{fix.line}", True, True, fix.path)


TOOL = Tool(
    "apply_fix",
    run,
    ToolCaps(listed=False),
    params=(ToolParam("n", "the candidate's number (default: the next)", required=False, type=int),),
    prompt="apply candidate n (default: the next) of the last fixes(), undoing the one applied before",
    description="Apply candidate `n` of the last fixes() listing, undoing the candidate applied before it; "
    "without `n`, the candidate after the one applied last.",
    returns="The edit applied, or why none was.",
)
