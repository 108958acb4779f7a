"""`fixes()`'s localization program and code that runs at import: a table filled by module-level calls runs
before any test, so the tests' own line spectra never hold it. The program links a test to a module-level
statement whose string constants share a word with the test's parameters, and counts the lines that
statement ran, a line about module-level data only for tests whose own lines name that data."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trialground.envs.repair import LOCALIZE_PROGRAM, Localized, RepairMemo, parse_result
from trialground.tasks.model import Task

LIBRARY = """\
WORDS = []
SIZES = {}


def _add(word, translation):
    WORDS.insert(0, (word, translation))
    SIZES[word] = len(translation)SIZE_BUG


def lookup(word):
    for known, translation in WORDS:
        if known == word:
            return translation
    return None


def size(word):
    return SIZES.get(word)


_add("apple", "pomme")
PEAR_CALL
_add("cherry", "cerise")
"""
TESTS = """\
import pytest

import lib

PAIRS = [("apple", "pomme"), ("pear", "poire"), ("cherry", "cerise")]


@pytest.mark.parametrize("word,translation", PAIRS)
def test_lookup(word, translation):
    assert lib.lookup(word) == translation


@pytest.mark.parametrize("word,translation", PAIRS)
def test_size(word, translation):
    assert lib.size(word) == len(translation)
"""
PEAR = '_add("pear", "poire")'
CALL_LINE, INSERT_LINE, SIZES_LINE, SIZE_LINE = 22, 6, 7, 17  # SIZE_LINE: `def size`


WORDS = ["apple-pomme", "pear-poire", "cherry-cerise"]
PARAMETRIZED = [f"tests/test_lib.py::test_{name}[{w}]" for name in ("lookup", "size") for w in WORDS]


def _localize(
    tmp_path: Path, *, pear: str = PEAR, size_bug: str = "", tests: str = TESTS, ids: list[str] = PARAMETRIZED
) -> Localized:
    """The program run as `fixes()` runs it, on a library `lib` and its tests in `tmp_path`."""
    (tmp_path / "lib").mkdir()
    library = LIBRARY.replace("PEAR_CALL", pear).replace("SIZE_BUG", size_bug)
    assert library.split("\n")[CALL_LINE - 1] == pear
    (tmp_path / "lib" / "__init__.py").write_text(library)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_lib.py").write_text(tests)
    stdin = json.dumps({"tests": ids, "args": [], "library": ["lib/"], "top": 40})
    done = subprocess.run(
        [sys.executable, "-I", "-c", LOCALIZE_PROGRAM],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    result = parse_result(done.stdout)
    assert result is not None, (done.stdout, done.stderr)
    return result


def test_a_wrong_module_level_call_is_ranked_first(tmp_path: Path) -> None:
    """`_add("poire", "pear")`: both tests of pear fail. The call mentions their words, so its line heads
    the ranking; without the link no test ran it and it was not ranked at all."""
    result = _localize(tmp_path, pear='_add("poire", "pear")')
    assert (result.failed, result.passed) == (2, 4)
    assert result.ranked[0] == ("lib/__init__.py", CALL_LINE)


def test_a_table_line_counts_only_for_the_tests_that_read_its_table(tmp_path: Path) -> None:
    """A wrong size in `_add`'s body fails the three size tests and no lookup test. Every test is linked
    to its word's call, which ran both body lines; the SIZES line counts for the size tests (their lines
    name SIZES) and the WORDS line only for the lookup tests, so the SIZES line ranks with `size`'s own
    lines (its call and return), and the WORDS line, run by passing tests alone, is not ranked."""
    result = _localize(tmp_path, size_bug=" + 1")
    assert (result.failed, result.passed) == (3, 3)
    top = {line for path, line in result.ranked[:3]}
    assert top == {SIZES_LINE, SIZE_LINE, SIZE_LINE + 1}, result.ranked
    assert ("lib/__init__.py", INSERT_LINE) not in result.ranked


def test_a_test_without_parameters_links_to_nothing_at_import(tmp_path: Path) -> None:
    """Only tests' parameters link them to import-time code: the same bug seen by unparametrized tests
    ranks only the lines the tests ran."""
    single = "import lib\n\n\ndef test_pear():\n    assert lib.lookup('pear') == 'poire'\n"
    bug = '_add("poire", "pear")'
    result = _localize(tmp_path, pear=bug, tests=single, ids=["tests/test_lib.py::test_pear"])
    assert result.failed == 1
    assert {line for _, line in result.ranked} == {10, 11, 12, 14}  # lookup's call, loop, test and return


def test_a_swapped_irregular_word_of_inflection_is_the_first_candidate(swe_cache: Path) -> None:
    """The real case, through `fixes()` in a bwrap sandbox with the workspace's bundled pytest:
    inflection fills its irregular-word rules by module-level calls, `_irregular('cow', 'kine')` swapped
    fails the three cow/kine tests, and the first listed candidate swaps it back."""
    import ast
    import asyncio

    from trialground.envs.config import EnvConfig
    from trialground.envs.tool_env import ToolEnv
    from trialground.envs.toolcalls import format_tool_call
    from trialground.sandbox.backends.bwrap.sandbox import bwrap_available
    from trialground.sandbox.base import SandboxConfig
    from trialground.tasks.swe import task_from_record
    from trialground.tasks.swe.build import BugRecord
    from trialground.tasks.swe.repos import repo_files, repo_spec
    from trialground.verify.grader import make_grader

    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    spec = repo_spec("inflection")
    path = "inflection/__init__.py"
    pristine = repo_files(spec)[path]
    assert pristine.count("_irregular('cow', 'kine')") == 1
    failing = tuple(
        f"test_inflection.py::test_{t}[cow-kine]"
        for t in ("pluralize_plural", "pluralize_singular", "singularize_plural")
    )
    passing = tuple(
        f"test_inflection.py::test_{t}[person-people]"
        for t in ("pluralize_plural", "pluralize_singular", "singularize_plural")
    )
    record = BugRecord(
        path=path,
        kind="swap_args",
        line=pristine[: pristine.index("_irregular('cow'")].count("\n") + 1,
        description="swap_args: the cow/kine call",
        text=pristine.replace("_irregular('cow', 'kine')", "_irregular('kine', 'cow')"),
        fail_to_pass=failing,
        pass_to_pass=passing,
        statement="",
    )
    task = task_from_record(spec, record, "eval")
    config = SandboxConfig()
    env_config = EnvConfig(
        kind="tool", max_turns=4, observation_budget_chars=2000, tool_timeout_s=120, repair_tools=True
    )

    async def listing() -> tuple[str, list[str]]:
        grader = make_grader(config)
        env = ToolEnv(grader, env_config, config)
        try:
            await env.reset(task)
            obs = await env.step(format_tool_call("fixes", {}))
            return obs.text, [f.after for f in env.state.memos[RepairMemo].fixes]
        finally:
            await env.close()
            await grader.close()

    text, afters = asyncio.run(listing())
    assert text.startswith(f"{len(afters)} fixes in {path} for 3 failing tests (3 passing)"), text
    assert afters and ast.dump(ast.parse(afters[0])) == ast.dump(ast.parse(pristine)), text


def test_the_ceiling_script_finds_the_candidate_that_undoes_a_real_bug(swe_tasks: list[Task]) -> None:
    """`scripts/repair_ceiling.py`'s rank: the listed candidate whose file parses to the library's own tree.
    The session's three inflection bugs include one the player solves (test_swe_repair.py); its rank is a
    listed position, and a candidate that leaves the bug in place is never taken for the fix."""
    from script_helpers import load_script

    from trialground.tasks.swe.repos import repo_files, repo_spec

    ceiling = load_script("scripts/repair_ceiling.py")
    pristine = repo_files(repo_spec("inflection"))
    found = [ceiling.rank(task, pristine) for task in swe_tasks]
    assert any(rank is not None and 1 <= rank <= listed for rank, listed in found), found
    buggy = {**pristine, **{p: t for p, t in swe_tasks[0].files.items() if p in pristine}}
    assert ceiling.rank(swe_tasks[0], buggy)[0] is None  # the bug itself is no candidate's result
