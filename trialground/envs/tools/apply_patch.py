"""`apply_patch(patch)`: a unified diff, refused on the host by size and header paths, else applied by
`git apply` in the sandbox (`trialground.envs.patching`)."""

from __future__ import annotations

from trialground.envs import patching
from trialground.envs.tools.base import Tool, ToolCall, ToolCaps, ToolOutcome, ToolParam, render_exec


async def run(call: ToolCall) -> ToolOutcome:
    """`target` is the first file the patch touches, or the first of them that is one of the task's checks
    (the tamper detector reads it)."""
    patch = call.args["patch"]
    refused = patching.refusal(patch)
    if refused is not None:
        return ToolOutcome(f"error: {refused}; nothing changed", False, False)
    argv = patching.patch_argv(call.box.python, patch)
    report = call.limits.model_copy(update={"output_bytes": patching.REPORT_BYTES})
    res = await call.box.exec(argv, report, stdin=patching.patch_bytes(patch))
    result = patching.parse_result(res.stdout) if res.ok else None
    if result is None:  # killed or timed out: whether git had started writing is unknown
        return ToolOutcome(f"error: apply_patch did not finish\n{render_exec(res)}", False, None)
    task = call.box.task
    checks = {*task.visible_checks, *task.hidden_checks}
    target = next((f for f in result.files if f in checks), result.files[0] if result.files else None)
    if not result.ok:
        unchanged = "nothing changed" if result.changed is False else "the workspace may have changed"
        return ToolOutcome(
            f"error: the patch does not apply; {unchanged}\n{result.error}", False, result.changed, target
        )
    return ToolOutcome(patching.summary(result.files, result.changed), True, result.changed, target)


TOOL = Tool(
    "apply_patch",
    run,
    ToolCaps(listed=False),
    params=(
        ToolParam("patch", "the unified diff; paths relative to /workspace, with or without a/ b/ prefixes"),
    ),
    prompt="apply a unified diff to the workspace",
    description="Apply a unified diff (as `git diff` writes it; several files, new and deleted files) to the "
    "workspace. All or nothing: a patch that does not apply changes nothing.",
    returns="The files changed, or why the patch does not apply (then nothing changed).",
)
