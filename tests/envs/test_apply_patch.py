"""`apply_patch` in a real bwrap sandbox: git's all-or-nothing apply, and nothing written outside the
workspace whatever the patch names."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from envkit import call, code_task

from trialground.envs import patching
from trialground.envs.config import EnvConfig
from trialground.envs.tool_env import ToolEnv
from trialground.envs.tools.base import make_action
from trialground.envs.tools.registry import TOOL_DOCS, run_named, tool_docs, tool_schemas
from trialground.envs.tools.toolbox import READ_FILE_MAX_BYTES, Toolbox
from trialground.sandbox.base import Sandbox, SandboxConfig
from trialground.sandbox.factory import open_sandbox
from trialground.tasks.model import Task, VerifierSpec
from trialground.tasks.swe.patch import apply_patch as swe_apply_patch
from trialground.tasks.swe.patch import make_patch
from trialground.verify.config import RewardConfig
from trialground.verify.grader import Grader
from trialground.verify.reward.shaping import count_redundant

TASK = Task(
    domain="code",
    prompt="Patch it.",
    files={"x.py": "a\nb\nc\n", "y.py": "one\n", "old.txt": "bye\n", "pkg/mod.py": "K = 1\n"},
    verifier=VerifierSpec(kind="exact", params={"answer": "x"}),
)

TWO_FILES = """diff --git a/x.py b/x.py
--- a/x.py
+++ b/x.py
@@ -1,3 +1,3 @@
 a
-b
+B
 c
diff --git a/y.py b/y.py
--- a/y.py
+++ b/y.py
@@ -1 +1,2 @@
 one
+two
"""


@pytest.fixture
async def box() -> AsyncIterator[Toolbox]:
    sandbox = await open_sandbox(SandboxConfig(), TASK.files)
    try:
        yield Toolbox(sandbox, TASK, SandboxConfig().limits)
    finally:
        await sandbox.close()


async def _text(sandbox: Sandbox, path: str) -> str | None:
    try:
        return (await sandbox.read(path)).decode()
    except FileNotFoundError:
        return None


async def _sh(box: Toolbox, command: str) -> str:
    out = await run_named(box, "bash", {"command": command}, 10)
    return out.text


async def test_a_two_file_patch_applies_and_names_the_files(box: Toolbox) -> None:
    out = await run_named(box, "apply_patch", {"patch": TWO_FILES}, 10)
    assert out.text == "applied patch: 2 files changed (x.py, y.py)"
    assert out.ok and out.changed_workspace is True and out.target == "x.py"
    assert await _text(box.sandbox, "x.py") == "a\nB\nc\n"
    assert await _text(box.sandbox, "y.py") == "one\ntwo\n"


async def test_bare_paths_new_and_deleted_files_and_miscounted_hunks(box: Toolbox) -> None:
    bare = (  # as `diff -u` writes it: no a/ b/ prefixes (-p0); a new file in a new folder; a deletion
        "--- pkg/mod.py\n+++ pkg/mod.py\n@@ -1 +1 @@\n-K = 1\n+K = 2\n"
        "--- /dev/null\n+++ pkg/sub/new.py\n@@ -0,0 +1,2 @@\n+def f():\n+    return 1\n"
        "--- old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    out = await run_named(box, "apply_patch", {"patch": bare}, 10)
    assert out.text == "applied patch: 3 files changed (pkg/mod.py, pkg/sub/new.py, old.txt)", out.text
    assert out.ok and out.changed_workspace is True
    assert await _text(box.sandbox, "pkg/mod.py") == "K = 2\n"
    assert await _text(box.sandbox, "pkg/sub/new.py") == "def f():\n    return 1\n"
    assert await _text(box.sandbox, "old.txt") is None
    # hunk line counts a model got wrong: recounted
    out = await run_named(
        box, "apply_patch", {"patch": "--- a/y.py\n+++ b/y.py\n@@ -1,7 +1,9 @@\n-one\n+uno\n"}, 10
    )
    assert out.ok and await _text(box.sandbox, "y.py") == "uno\n", out.text
    # a patch that applies and changes nothing is an edit that changed nothing (redundant in shaping)
    out = await run_named(
        box, "apply_patch", {"patch": "--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-uno\n+uno\n"}, 10
    )
    assert out.ok and out.changed_workspace is False
    assert out.text == "applied patch: 1 file, contents unchanged (y.py)"


async def test_a_diff_as_repository_tasks_write_them_applies_as_their_patch_reader_reads_it(
    box: Toolbox,
) -> None:
    new = {
        "x.py": "a\nb\nc",  # loses its last newline
        "old.txt": None,
        "pkg/mod.py": "".join(f"K{i} = {i}\n" for i in range(30)),
        "pkg/added.py": "ADDED = True\n",
    }
    diff = make_patch(TASK.files, new)
    out = await run_named(box, "apply_patch", {"patch": diff}, 10)
    assert out.ok and out.changed_workspace is True, out.text
    expected = swe_apply_patch(TASK.files, diff)
    assert set(expected) == set(new)
    for path, text in expected.items():
        assert await _text(box.sandbox, path) == text == new[path], path


async def test_a_lone_surrogate_from_a_json_call_is_text_not_a_crash(box: Toolbox) -> None:
    out = await run_named(
        box, "apply_patch", {"patch": "--- a/y.py\n+++ b/y.py\n@@ -1 +1 @@\n-one\n+\ud800\n"}, 10
    )
    assert out.ok and await _text(box.sandbox, "y.py") == "?\n", out.text


async def test_lone_surrogates_in_python_code_and_written_files_are_data_not_a_crash(box: Toolbox) -> None:
    # JSON tool arguments can decode to lone surrogates; stdin and files get them as bytes, never an
    # encoding error that would end the episode as a broken sandbox
    out = await run_named(box, "python", {"code": "print(len('\ud800'))\n# \udcff"}, 10)
    assert not out.ok and "SyntaxError: Non-UTF-8 code" in out.text, out.text  # Python's answer, not ours
    out = await run_named(box, "bash", {"command": "cat > r.bin; wc -c < r.bin # \udc80"}, 10)
    assert out.ok and out.text.endswith("\n0"), out.text
    out = await run_named(box, "write_file", {"path": "s.txt", "content": "a\udcffb\ud800"}, 10)
    assert out.ok, out.text
    assert await box.sandbox.read("s.txt") == b"a\xed\xb3\xbfb\xed\xa0\x80"  # their 3-byte forms
    out = await run_named(box, "write_file", {"path": "e.txt", "content": "a\udcffb"}, 10)
    assert out.ok and await box.sandbox.read("e.txt") == b"a\xffb"  # U+DCFF alone: the byte it escapes


async def test_a_failing_hunk_is_named_and_nothing_changes(box: Toolbox) -> None:
    bad = TWO_FILES.replace(" one\n+two", " zero\n+two")  # x.py's hunk applies, y.py's does not
    before = await box.workspace_digest()
    out = await run_named(box, "apply_patch", {"patch": bad}, 10)
    assert not out.ok and out.changed_workspace is False
    assert out.text.startswith("error: the patch does not apply; nothing changed\n")
    assert "error: patch failed: y.py:1" in out.text and "while searching for:\nzero" in out.text
    assert "patch failed: x.py" not in out.text
    assert await box.workspace_digest() == before
    assert await _text(box.sandbox, "x.py") == "a\nb\nc\n"  # all or nothing
    out = await run_named(box, "apply_patch", {"patch": "this is not a diff\n"}, 10)
    assert not out.ok and "No valid patches" in out.text and await box.workspace_digest() == before


@pytest.mark.parametrize(
    "patch",
    [
        "--- /dev/null\n+++ b/../evil\n@@ -0,0 +1 @@\n+x\n",  # refused on the host
        "--- /dev/null\n+++ /tmp/evil\n@@ -0,0 +1 @@\n+x\n",
        "--- a/x.py\n+++ b/../../tmp/evil\n@@ -1 +1 @@\n-a\n+x\n",
        "diff --git a/../tmp/evil b/../tmp/evil\nnew file mode 100644\n",  # no ---/+++: git refuses it
        "diff --git a//tmp/evil b//tmp/evil\nnew file mode 100644\n",
    ],
)
async def test_paths_outside_the_workspace_are_refused(box: Toolbox, patch: str) -> None:
    before = await box.workspace_digest()
    out = await run_named(box, "apply_patch", {"patch": patch}, 10)
    assert not out.ok and out.changed_workspace is False
    assert "outside the workspace" in out.text or "invalid path" in out.text, out.text
    assert await box.workspace_digest() == before
    assert await _sh(box, "ls -A /tmp; test -e /evil && echo FOUND; true") == "[exit 0]"


async def test_a_symlink_planted_in_the_workspace_is_not_written_through(box: Toolbox) -> None:
    await _sh(
        box, "mkdir /tmp/out && echo keep > /tmp/out/t.py && ln -s /tmp/out out && ln -s /tmp/out/t.py t.py"
    )
    before = await box.workspace_digest()
    through_dir = "--- /dev/null\n+++ b/out/pwn.txt\n@@ -0,0 +1 @@\n+pwned\n"
    out = await run_named(box, "apply_patch", {"patch": through_dir}, 10)
    assert not out.ok and "beyond a symbolic link" in out.text, out.text
    # a link made by the patch itself, then a file through it
    made_here = (
        "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/tmp/out\n"
        "\\ No newline at end of file\n"
        "diff --git a/l/pwn.txt b/l/pwn.txt\nnew file mode 100644\n--- /dev/null\n+++ b/l/pwn.txt\n"
        "@@ -0,0 +1 @@\n+pwned\n"
    )
    out = await run_named(box, "apply_patch", {"patch": made_here}, 10)
    assert not out.ok and "beyond a symbolic link" in out.text, out.text
    # a link to a file: git patches the link itself (its target text), never the file it points to
    out = await run_named(
        box, "apply_patch", {"patch": "--- a/t.py\n+++ b/t.py\n@@ -1 +1 @@\n-keep\n+pwned\n"}, 10
    )
    assert not out.ok, out.text
    assert await box.workspace_digest() == before
    assert await _sh(box, "ls -A /tmp/out; cat /tmp/out/t.py") == "[exit 0]\nt.py\nkeep"


async def test_too_large_and_empty_patches_are_refused(box: Toolbox) -> None:
    assert patching.PATCH_MAX_BYTES == READ_FILE_MAX_BYTES
    big = "--- /dev/null\n+++ b/big.txt\n@@ -0,0 +1 @@\n+" + "x" * READ_FILE_MAX_BYTES + "\n"
    out = await run_named(box, "apply_patch", {"patch": big}, 10)
    assert not out.ok and out.changed_workspace is False
    assert out.text.startswith("error: the patch is ") and f"takes {READ_FILE_MAX_BYTES} at most" in out.text
    assert await _text(box.sandbox, "big.txt") is None
    out = await run_named(box, "apply_patch", {"patch": " \n"}, 10)
    assert not out.ok and "non-empty" in out.text


async def test_a_git_repository_planted_in_the_workspace_configures_nothing(box: Toolbox) -> None:
    # in that repository's configuration, context lines that differ in spaces would match
    await _sh(
        box, "printf 'a  b\\nc\\n' > w.txt && git init -q . && git config apply.ignoreWhitespace change"
    )
    assert await _sh(box, "git config apply.ignoreWhitespace") == "[exit 0]\nchange"
    out = await run_named(
        box, "apply_patch", {"patch": "--- a/w.txt\n+++ b/w.txt\n@@ -1,2 +1,2 @@\n a b\n-c\n+d\n"}, 10
    )
    assert not out.ok and "patch failed: w.txt:1" in out.text, out.text


def test_listed_in_the_prompt_only_with_patch_tool_and_always_a_schema() -> None:
    assert "apply_patch" not in TOOL_DOCS and tool_docs(False) == TOOL_DOCS
    assert "apply_patch" not in tool_docs(True)  # the navigation prompt the bundled policy learnt stays
    line = "- apply_patch(patch): apply a unified diff to the workspace"
    for navigation in (False, True):
        docs = tool_docs(navigation, patch=True)
        assert line in docs and ("read_lines(" in docs) == navigation
        assert docs.endswith("\n- submit(answer?): finish; the workspace (or `answer`) is graded")
    schema = next(s["function"] for s in tool_schemas() if s["function"]["name"] == "apply_patch")
    assert schema["parameters"]["required"] == ["patch"]
    assert "apply_patch" in RewardConfig().edit_tools


async def test_in_an_episode_it_is_an_edit_and_a_patched_check_is_its_target(
    grader: Grader, sandbox_config: SandboxConfig
) -> None:
    env = ToolEnv(grader, EnvConfig(kind="tool", max_turns=10), sandbox_config)
    try:
        obs = await env.reset(code_task())
        assert "apply_patch" not in obs.text  # callable, not listed: the trained prompt is unchanged
        fix = (
            "--- a/solution.py\n+++ b/solution.py\n@@ -1,2 +1,2 @@\n"
            " def add(a, b):\n-    return a - b\n+    return a + b\n"
        )
        obs = await env.step(call("apply_patch", patch=fix))
        assert obs.text == "applied patch: 1 file changed (solution.py)"
        obs = await env.step(call("apply_patch", patch=fix))  # again: no longer applies
        assert obs.text.startswith("error: the patch does not apply; nothing changed")
        tamper = (
            "--- a/solution.py\n+++ b/solution.py\n@@ -6 +6 @@\n-    return a + a\n+    return 2 * a\n"
            "--- a/test_visible.py\n+++ b/test_visible.py\n"
            "@@ -5 +5 @@\n-    assert add(1, 2) == 3\n+    pass\n"
        )
        obs = await env.step(call("apply_patch", patch=tamper))
        patches = [a for a in env.actions if a.tool == "apply_patch"]
        assert [(a.ok, a.changed_workspace) for a in patches] == [
            (True, True),
            (False, False),
            (True, True),
        ], obs.text
        assert patches[0].target == "solution.py" and patches[2].target == "test_visible.py"
        obs = await env.step(call("submit"))
        assert obs.done
    finally:
        await env.close()
    noop = make_action("apply_patch", {"patch": fix}, patches[1])
    assert count_redundant([noop], RewardConfig()) == 1  # an edit that changed nothing
