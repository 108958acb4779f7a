"""Task file IO: JSONL and directory round trips; broken files name the file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trialground.errors import TaskError
from trialground.sandbox.base import Limits
from trialground.tasks.io import (
    read_jsonl,
    read_task_dir,
    read_task_dirs,
    read_tasks,
    write_jsonl,
    write_task_dir,
    write_task_dirs,
)
from trialground.tasks.model import Task, VerifierSpec


def _task(i: int = 0, **kw: object) -> Task:
    base: dict[str, object] = {
        "domain": "code",
        "prompt": f"Write f{i}(x) returning x + {i}.\nUnicode: é ✓",
        "files": {"README.md": "hello\n", "pkg/data.txt": "a,b\n1,2\n"},
        "visible_checks": {
            "test_visible.py": f"from solution import f{i}\n\ndef test_a():\n    assert f{i}(0) == {i}\n"
        },
        "hidden_checks": {"tests/test_hidden.py": "import solution\n\ndef test_b():\n    assert True\n"},
        "reference": f"def f{i}(x):\n    return x + {i}\n",
        "verifier": VerifierSpec(
            kind="code_tests", params={"expected_tests": 1, "solution_path": "solution.py"}
        ),
        "limits": Limits(wall_s=3.0),
        "split": "eval" if i % 2 else "train",
        "metadata": {"source": "unit", "n": i, "ok": True, "none": None},
    }
    base.update(kw)
    return Task.model_validate(base)


def test_jsonl_round_trip(tmp_path: Path) -> None:
    tasks = [_task(i) for i in range(5)] + [_task(9, reference=None, limits=None)]
    path = tmp_path / "t.jsonl"
    assert write_jsonl(tasks, path) == 6
    back = read_jsonl(path)
    assert back == tasks
    assert [t.id for t in back] == [t.content_hash() for t in tasks]
    # fields by name: a reader without trialground sees the model's fields
    first = json.loads(path.read_text().splitlines()[0])
    assert set(first) == set(Task.model_fields)


def test_jsonl_blank_lines_allowed_and_id_optional(tmp_path: Path) -> None:
    t = _task(1)
    row = t.model_dump(mode="json")
    del row["id"]
    path = tmp_path / "t.jsonl"
    path.write_text("\n" + json.dumps(row) + "\n   \n")
    assert read_jsonl(path) == [t]


@pytest.mark.parametrize(
    ("mutate", "line", "field"),
    [
        (lambda r: r["verifier"].update(kind="magic"), 2, "verifier.kind"),
        (lambda r: r.pop("prompt"), 2, "prompt"),
        (lambda r: r.update(split="test"), 2, "split"),
        (lambda r: r["limits"].update(wall_s=-1), 2, "limits.wall_s"),
        (lambda r: r.update(extra_field=1), 2, "extra_field"),
        (lambda r: r.update(id="0" * 16), 2, "id"),
        (lambda r: r["files"].update({"x": 3}), 2, "files.x"),
    ],
)
def test_broken_jsonl_names_file_line_field(tmp_path: Path, mutate, line: int, field: str) -> None:
    good = _task(0).model_dump(mode="json")
    bad = _task(1).model_dump(mode="json")
    mutate(bad)
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n" + json.dumps(good) + "\n")
    with pytest.raises(TaskError) as err:
        read_jsonl(path)
    assert str(err.value).startswith(f"{path}:{line}: {field}:"), str(err.value)


def test_bad_json_and_non_object(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(_task().model_dump(mode="json")) + "\n{not json\n")
    with pytest.raises(TaskError, match=rf"^{path}:2: \(json\):"):
        read_jsonl(path)
    path.write_text("[1, 2]\n")
    with pytest.raises(TaskError, match=rf"^{path}:1: expected a JSON object"):
        read_jsonl(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="no such file"):
        read_tasks(tmp_path / "nope.jsonl")


def test_dir_round_trip(tmp_path: Path) -> None:
    t = _task(3)
    root = write_task_dir(t, tmp_path / "one")
    assert (root / "task.yaml").is_file()
    assert (root / "files" / "pkg" / "data.txt").read_text() == "a,b\n1,2\n"
    assert (root / "tests" / "visible" / "test_visible.py").is_file()
    assert (root / "tests" / "hidden" / "tests" / "test_hidden.py").is_file()
    assert (root / "reference.txt").read_text() == t.reference
    assert read_task_dir(root) == t
    assert read_tasks(root) == [t]


def test_dir_collection_round_trip_keeps_order(tmp_path: Path) -> None:
    tasks = [_task(i) for i in (5, 1, 3)]
    write_task_dirs(tasks, tmp_path / "many")
    assert read_task_dirs(tmp_path / "many") == tasks


def test_dir_reference_inline_and_no_reference(tmp_path: Path) -> None:
    t = _task(2, reference=None)
    root = write_task_dir(t, tmp_path / "d")
    assert not (root / "reference.txt").exists()
    assert read_task_dir(root) == t
    # reference inline in task.yaml works too; both at once is refused
    (root / "task.yaml").write_text((root / "task.yaml").read_text() + "reference: 'print(1)'\n")
    assert read_task_dir(root, check_ids=False).reference == "print(1)"
    (root / "reference.txt").write_text("x")
    with pytest.raises(TaskError, match="reference: given both"):
        read_task_dir(root, check_ids=False)


def test_broken_dir_names_file_line_field(tmp_path: Path) -> None:
    root = write_task_dir(_task(0), tmp_path / "d")
    meta = root / "task.yaml"
    lines = meta.read_text().splitlines()
    at = next(i for i, s in enumerate(lines) if s.startswith("split:"))
    lines[at] = "split: sometimes"
    meta.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskError) as err:
        read_task_dir(root)
    assert str(err.value).startswith(f"{meta}:{at + 1}: split:"), str(err.value)
    meta.write_text("domain: code\nprompt: [unclosed\n")
    with pytest.raises(TaskError, match=rf"^{meta}:\d+: \(yaml\)"):
        read_task_dir(root)


def test_dir_rejects_misplaced_and_stray_content(tmp_path: Path) -> None:
    root = write_task_dir(_task(0), tmp_path / "d")
    (root / "tests" / "secret").mkdir()
    with pytest.raises(TaskError, match="tests/visible/ or tests/hidden/"):
        read_task_dir(root)
    (root / "tests" / "secret").rmdir()
    (root / "files" / "blob.bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(TaskError, match=r"blob.bin: not UTF-8"):
        read_task_dir(root)
    (root / "files" / "blob.bin").unlink()
    meta = root / "task.yaml"
    meta.write_text(meta.read_text() + "files: {a: b}\n")
    with pytest.raises(TaskError, match="files: belongs in files/"):
        read_task_dir(root)


def test_collection_with_a_non_task_subdir_is_an_error(tmp_path: Path) -> None:
    write_task_dirs([_task(0), _task(1)], tmp_path / "many")
    (tmp_path / "many" / "zz_stray").mkdir()
    with pytest.raises(TaskError, match="zz_stray: not a task directory"):
        read_task_dirs(tmp_path / "many")


def test_write_task_dir_refuses_non_empty(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("1")
    with pytest.raises(TaskError, match="not empty"):
        write_task_dir(_task(0), tmp_path / "d")


def test_generated_tasks_round_trip_both_forms(tmp_path: Path) -> None:
    """Dotfiles (.env), empty files (out/.keep) and nested paths survive both forms."""
    from trialground.tasks.sources import load_source

    tasks = load_source("ops", n=14) + load_source("humaneval", n=3) + load_source("data", n=3)
    assert any(".env" in t.files for t in tasks) and any("out/.keep" in t.files for t in tasks)
    write_jsonl(tasks, tmp_path / "t.jsonl")
    assert read_tasks(tmp_path / "t.jsonl") == tasks
    write_task_dirs(tasks, tmp_path / "dirs")
    assert read_tasks(tmp_path / "dirs") == tasks
