"""Task files that name paths: workspace and check file names are validated when a task is made, so
every source (the model itself, JSONL, task directories, `hf:` datasets, generators) refuses an absolute,
`..`, NUL or control-character name; and `tasks export` writes only beneath its target directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from trialground.errors import TaskError
from trialground.tasks.io import read_jsonl, read_task_dirs, write_task_dirs
from trialground.tasks.model import Task, VerifierSpec

ROOT = Path(__file__).resolve().parents[2]
BAD_NAMES = [
    "/tmp/abs.txt",
    "../escape.txt",
    "a/../../escape.txt",
    "a/b/../../../escape.txt",
    "nul\0.txt",
    "new\nline.txt",
    "",
    ".",
    "a//b.txt",
    "dir/",
    "./a.txt",
    "x" * 300,
]
FIELDS = ["files", "visible_checks", "hidden_checks"]


def _row(field: str, name: str) -> dict:
    return {
        "domain": "code",
        "prompt": "p",
        "verifier": {"kind": "exact", "params": {"answer": "x"}},
        field: {name: "pwned\n"},
    }


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_task_model_refuses_bad_names(field: str, name: str) -> None:
    with pytest.raises(ValidationError, match="file name"):
        Task(domain="code", prompt="p", verifier=VerifierSpec(kind="exact", params={"answer": "x"}),
             **{field: {name: "x"}})  # fmt: skip


@pytest.mark.parametrize("name", ["a.txt", "src/pkg/mod.py", "tests/test_x.py", ".hidden", "a..b", "..x"])
def test_ordinary_names_are_kept(name: str) -> None:
    t = Task(
        domain="c", prompt="p", verifier=VerifierSpec(kind="exact", params={"answer": "x"}), files={name: "y"}
    )
    assert list(t.files) == [name]


@pytest.mark.parametrize("name", ["../escape.txt", "/tmp/abs.txt", "nul\0.txt"])
def test_jsonl_source_refuses_bad_names(tmp_path: Path, name: str) -> None:
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(_row("hidden_checks", name)) + "\n")
    with pytest.raises(TaskError, match="file name"):
        read_jsonl(src, check_ids=False)


@pytest.mark.parametrize("name", ["../escape.txt", "/tmp/abs.txt"])
def test_hf_source_refuses_bad_names(tmp_path: Path, name: str) -> None:
    from trialground.tasks.hf_source import hf_tasks

    row = _row("files", name)
    table = pa.table({k: [json.dumps(v) if isinstance(v, dict) else v] for k, v in row.items()})
    pq.write_table(table, tmp_path / "tasks.parquet")
    with pytest.raises(TaskError, match="file name"):
        hf_tasks(str(tmp_path / "tasks.parquet"))


def test_task_dir_source_refuses_control_characters(tmp_path: Path) -> None:
    task = Task(domain="c", prompt="p", verifier=VerifierSpec(kind="exact", params={"answer": "x"}))
    (d,) = write_task_dirs([task], tmp_path / "tasks")
    (d / "files").mkdir()
    (d / "files" / "evil\nname.py").write_text("x")
    with pytest.raises(TaskError, match="file name"):
        read_task_dirs(tmp_path / "tasks", check_ids=False)


@pytest.mark.parametrize("name", ["../../escape.txt", "../../../escape.txt", "ABS"])
def test_export_writes_only_beneath_its_target(tmp_path: Path, name: str) -> None:
    target = tmp_path / "deep" / "out"
    outside = tmp_path / "abs_escape.txt"
    name = str(outside) if name == "ABS" else name
    src = tmp_path / "t.jsonl"
    src.write_text(json.dumps(_row("files", name)) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "trialground", "tasks", "export", str(src), "--out", str(target)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file() and p != src)
    assert all(p.is_relative_to(target) for p in written), written
    assert proc.returncode != 0 and "file name" in proc.stderr, proc.stderr


def test_write_task_dir_checks_each_target_even_for_unvalidated_tasks(tmp_path: Path) -> None:
    # A task built without validation (model_construct) still cannot write outside its directory.
    base = Task(domain="c", prompt="p", verifier=VerifierSpec(kind="exact", params={"answer": "x"}))
    forged = base.model_copy(update={"files": {"../../../escape.txt": "x"}})
    with pytest.raises(TaskError, match="beneath"):
        write_task_dirs([forged], tmp_path / "a" / "b")
    assert not any(p.name == "escape.txt" for p in tmp_path.rglob("*"))
