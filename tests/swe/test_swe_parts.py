"""The pure parts of SWE task building: pinned fetching and safe unpacking, mutations, patches, paths."""

from __future__ import annotations

import ast
import hashlib
import io
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from trialground.errors import TaskError
from trialground.tasks.swe.mutate import candidates, mutations
from trialground.tasks.swe.patch import PatchError, apply_patch, make_patch
from trialground.tasks.swe.paths import classify
from trialground.tasks.swe.repos import REPOS, fetch, repo_spec, unpack
from trialground.verify.kinds.swe_tests import _summary_passed

SOURCE = '''\
def clamp(x, lo, hi):
    """Clamp x to [lo, hi]."""
    if lo > hi:
        raise ValueError("empty range")
    if x < lo:
        return lo
    elif x > hi:
        return hi
    else:
        return x + 0  # keep


def total(xs):
    if not xs:
        return 0
    return sum(xs[1:], xs[0]) if xs and not len(xs) == 0 else max(0, 1)
'''


def test_every_mutation_kind_parses_and_changes_one_place() -> None:
    found = mutations("m.py", SOURCE)
    kinds = {m.kind for m in found}
    assert kinds >= {"operator", "compare", "off_by_one", "drop_else", "remove_guard", "swap_args", "negate"}
    for m in found:
        assert ast.dump(ast.parse(m.text)) != ast.dump(ast.parse(SOURCE)), m.description
        assert "# keep" in m.text or m.kind == "drop_else", m.description  # comments elsewhere survive
    guard = next(m for m in found if m.kind == "remove_guard")
    assert "raise ValueError" not in guard.text
    assert candidates({"m.py": SOURCE}, seed=1, limit=7) == candidates({"m.py": SOURCE}, seed=1, limit=7)
    assert len({m.kind for m in candidates({"m.py": SOURCE}, seed=1, limit=7)}) == 7  # kinds interleaved


def test_patches_round_trip_including_created_deleted_and_no_final_newline() -> None:
    old = {
        "a.py": "x = 1\ny = 2\nz = 3",
        "b.py": "gone\n",
        "c/d.py": "\n".join(f"l{i}" for i in range(40)) + "\n",
    }
    new: dict[str, str | None] = {
        "a.py": "x = 1\ny = 20\nz = 3\n",
        "b.py": None,
        "e.py": "new\nfile",
        "c/d.py": old["c/d.py"].replace("l3\n", "L3\n").replace("l30\n", ""),
    }
    patch = make_patch(old, new)
    assert "\\ No newline at end of file" in patch
    assert apply_patch(old, patch) == new
    assert apply_patch(old, "") == {}
    with pytest.raises(PatchError, match="does not match"):
        apply_patch({**old, "a.py": "x = 1\ny = 3\nz = 3"}, patch)
    with pytest.raises(PatchError, match="unsafe"):
        apply_patch(old, "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.parametrize("digits", [10, 5000])
def test_a_patch_or_test_summary_with_huge_numbers_is_the_submissions_failure(digits: int) -> None:
    """A hunk header's line number of 5,000 digits raised int()'s ValueError, not `PatchError`, so the
    verifier raised (an infrastructure error) instead of failing the patch; a pytest summary line the
    library prints with such a count did the same when grading."""
    huge = "9" * digits
    with pytest.raises(PatchError, match="malformed hunk header"):
        apply_patch({"a.py": "x\n"}, f"--- a/a.py\n+++ b/a.py\n@@ -{huge} +1 @@\n-x\n+y\n")
    with pytest.raises(PatchError, match="malformed hunk header"):
        apply_patch({"a.py": "x\n"}, f"--- a/a.py\n+++ b/a.py\n@@ -1,{huge} +1 @@\n-x\n+y\n")
    assert _summary_passed(f"{huge} passed in 0.1s") == -1
    assert _summary_passed("== 3 passed in 0.1s ==") == 3


def test_path_classes() -> None:
    spec = repo_spec("boltons")
    assert classify(spec, "boltons/iterutils.py") == "library"
    assert classify(spec, "boltons/new_module.py") == "library"
    protected = (
        "tests/test_iterutils.py",
        "tests/conftest.py",
        "conftest.py",
        "boltons/conftest.py",
        "sitecustomize.py",
        "boltons/x.pth",
        "pyproject.toml",
        "tox.ini",
        ".tg/site/_pytest/runner.py",
        "pytest.py",
        "_pytest/runner.py",
        "boltons/test_x.py",
        "boltons/__pycache__/a.py",
    )
    for path in protected:
        assert classify(spec, path) == "protected", path
    assert classify(spec, "notes.txt") == "other"
    assert classify(spec, "scratch.py") == "other"


def _sdist(members: dict[str, bytes], links: tuple[str, ...] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


def test_unpacking_keeps_only_plain_text_files_inside_the_tree() -> None:
    data = _sdist(
        {
            "p-1/ok.py": b"x = 1\n",
            "p-1/../evil.py": b"bad",
            "/abs.py": b"bad",
            "p-1/bin.dat": b"\xff\xfe",
            "p-1/tests/test_net.py": b"net",
            "p-1/a/__pycache__/m.py": b"stale",
        },
        links=("p-1/link.py",),
    )
    spec = replace(REPOS["parse"], drop=("tests/test_net.py",))
    assert unpack(spec, data) == {"ok.py": "x = 1\n"}


def test_a_cached_sdist_that_does_not_match_its_pin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIALGROUND_SWE_CACHE", str(tmp_path))
    spec = repo_spec("inflection")
    (tmp_path / "sdists").mkdir()
    bad = _sdist({"inflection-0.5.1/x.py": b"tampered\n"})
    (tmp_path / "sdists" / spec.filename).write_bytes(bad)
    assert hashlib.sha256(bad).hexdigest() != spec.sha256
    with pytest.raises(TaskError, match="does not match the pinned sha256"):
        fetch(spec)


def test_bad_specs_are_named() -> None:
    from trialground.tasks.sources import load_source

    with pytest.raises(TaskError, match=r"unknown repository 'nope'.*known: boltons, fonttools, inflection"):
        load_source("swe:nope")
    with pytest.raises(TaskError, match="candidates must be an integer"):
        load_source("swe:inflection:many")
    with pytest.raises(
        TaskError, match=r"swe: name an argument, swe:ARG \(bugs injected into a real library"
    ):
        load_source("swe")


def test_every_split_of_a_set_of_two_or_more_is_non_empty() -> None:
    from trialground.tasks.swe import assign_splits

    ids = [hashlib.sha256(str(i).encode()).hexdigest()[:12] for i in range(400)]
    plain = assign_splits(ids)
    assert 40 < sum(s == "eval" for s in plain.values()) < 120  # about one in five
    for size in range(2, 12):
        for start in range(0, 200, size):
            chunk = ids[start : start + size]
            splits = assign_splits(chunk)
            assert set(splits.values()) == {"train", "eval"}, chunk
            # at most one bug differs from the hash rule alone, so splits stay put as a set grows
            assert sum(splits[r] != plain[r] for r in chunk) <= 1
    only_train = [r for r in ids if plain[r] == "train"][:3]
    assert list(assign_splits(only_train).values()).count("eval") == 1
    only_eval = [r for r in ids if plain[r] == "eval"][:3]
    assert list(assign_splits(only_eval).values()).count("train") == 1
    assert assign_splits(ids[:1]) == {ids[0]: plain[ids[0]]}


def test_a_lib_layout_repository_injects_bugs_only_where_its_suite_looks() -> None:
    from trialground.tasks.swe.repos import is_mutable

    spec = repo_spec("fonttools")
    assert classify(spec, "Lib/fontTools/misc/arrayTools.py") == "library"
    assert classify(spec, "Lib/fontTools/ttLib/ttFont.py") == "library"  # a fix may change any of it
    assert classify(spec, "Tests/misc/arrayTools_test.py") == "protected"
    assert classify(spec, "Tests/pens/utils.py") == "protected"  # Tests/ is a test directory
    assert is_mutable(spec, "Lib/fontTools/pens/areaPen.py")
    assert not is_mutable(spec, "Lib/fontTools/ttLib/ttFont.py")
    assert is_mutable(repo_spec("inflection"), "inflection/__init__.py")  # no `mutate`: all library code
    assert spec.pytest_args == ("-o", "pythonpath=Lib")


def test_candidates_of_a_larger_limit_start_with_those_of_a_smaller_one() -> None:
    # what lets a larger task set extend a cached smaller one (build._cached_prefix)
    files = {"a.py": SOURCE, "b.py": SOURCE.replace("clamp", "clip")}
    for seed in range(3):
        full = candidates(files, seed=seed, limit=30)
        for m in (1, 5, 12, 29):
            assert candidates(files, seed=seed, limit=m) == full[:m]
