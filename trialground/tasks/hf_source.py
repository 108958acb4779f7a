"""`hf:PATH[?MAPPING]`: tasks from a local Hugging Face dataset, and `write_hf` to export tasks as one.

PATH is a directory written by `datasets.Dataset.save_to_disk` (or `DatasetDict.save_to_disk`), a
`.parquet` file, or a directory of `.parquet` files (read in name order; the layout of a dataset
downloaded from the Hub). Rows are read in order.

Two kinds of dataset:

- **Task rows** (no mapping): every row is a whole trialground task, as `write_hf` (`trialground tasks
  export SOURCE --format hf --out DIR`) writes it: the columns are the `Task` fields; `id`, `domain`,
  `prompt`, `split` and `reference` as text, the structured fields (`verifier`, `files`, `visible_checks`,
  `hidden_checks`, `limits`, `metadata`) as JSON text. A stored `id` must equal the content hash.
- **Any dataset with a column mapping** (`?key=value&...`, URL query syntax; `%xx` escapes allowed):

  | key | meaning | default |
  |---|---|---|
  | `prompt` | column holding the question (required) | |
  | `answer` | column holding the gold answer (for `regex`: the pattern) (required) | |
  | `verifier` | `exact`, `math`, `numeric` or `regex` | `exact` |
  | `split` | a column of `train`/`eval` values, or the constant `train` or `eval` | `train` |
  | `part` | which part of a saved `DatasetDict` (e.g. `test`) | every part |
  | `domain` | the tasks' domain | `math` for `math`, else `qa` |
  | `metadata` | comma-separated columns kept as task metadata (scalars) | none |
  | `rel_tol`, `abs_tol` | tolerances of `numeric` | 1e-6, 1e-9 |
  | `case_sensitive` | `exact`: compare case (`true`/`false`) | `false` |

  e.g. `hf:data/gsm8k?prompt=question&answer=final&verifier=numeric&split=eval`. The prompt is the
  column's text as it is; the verifier takes the answer from the completion's last `\\boxed{}`, else its
  last `Answer:` line, else the whole text. A `math` task is built as the `math` source builds one
  (prompt + "Put your final answer in \\boxed{}."). A `DatasetDict` part named `train` gives train tasks
  and any other part eval tasks, unless `split` says otherwise.

Errors raise `TaskError` naming the spec and, for a row, `row N` (0-based) and the column: a missing
column lists the dataset's columns; an unknown key lists the known ones. Nothing is skipped silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from trialground.errors import TaskError
from trialground.tasks.io import task_from_dict
from trialground.tasks.math_source import math_task
from trialground.tasks.model import Task, VerifierSpec

JSON_COLUMNS = ("verifier", "files", "visible_checks", "hidden_checks", "limits", "metadata")
TEXT_COLUMNS = ("id", "domain", "prompt", "split", "reference")
MAPPING_KEYS = (
    "prompt",
    "answer",
    "verifier",
    "split",
    "part",
    "domain",
    "metadata",
    "rel_tol",
    "abs_tol",
    "case_sensitive",
)
ANSWER_VERIFIERS = ("exact", "math", "numeric", "regex")
_SCALARS = (str, int, float, bool, type(None))


def parse_spec(arg: str) -> tuple[Path, dict[str, str]]:
    """`PATH[?k=v&...]` -> (path, mapping). Unknown or repeated keys raise `TaskError`."""
    path_text, _, query = arg.partition("?")
    if not path_text:
        raise TaskError(
            "hf: name a dataset, e.g. hf:DIR or hf:DIR?prompt=question&answer=answer", kind="bad_spec"
        )
    mapping: dict[str, str] = {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True) if query else []
    except ValueError as e:
        raise TaskError(
            f"hf:{arg}: the mapping after '?' must be key=value pairs joined by '&'", kind="bad_spec"
        ) from e
    for key, value in pairs:
        if key not in MAPPING_KEYS:
            raise TaskError(
                f"hf:{arg}: unknown key {key!r}; known: {', '.join(MAPPING_KEYS)}", kind="bad_spec"
            )
        if key in mapping:
            raise TaskError(f"hf:{arg}: key {key!r} given twice", kind="bad_spec")
        mapping[key] = value
    return Path(path_text).expanduser(), mapping


def check_local(arg: str) -> None:
    """`TaskError` unless `hf:ARG` names a local dataset: hub names are not fetched (runs read only local
    files, so they work offline and give the same tasks every time)."""
    path, _ = parse_spec(arg)
    if path.exists():
        return
    hub = (
        ""
        if path.is_absolute() or str(path).startswith(".")
        else (
            f"; {path} looks like a Hugging Face Hub name, and only local paths are read (no download, so a "
            f"run works offline): fetch it once, e.g. `huggingface-cli download {path} --repo-type dataset "
            f"--local-dir data/{path.name}`, then use hf:data/{path.name}"
        )
    )
    raise TaskError(f"hf:{arg}: {path} does not exist{hub}", kind="unreadable")


def _parquet_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("*.parquet") if p.is_file())


def read_parts(path: Path, where: str) -> list[tuple[str | None, list[dict[str, Any]]]]:
    """The dataset's rows as (part name or None, rows). A saved DatasetDict gives one entry per part."""
    if not path.exists():
        check_local(where.removeprefix("hf:"))
    if path.is_dir() and ((path / "state.json").is_file() or (path / "dataset_dict.json").is_file()):
        try:
            import datasets
        except ImportError as e:
            raise TaskError(
                f"{where}: reading a save_to_disk dataset needs `datasets` (pip install 'trialground[hf]')",
                kind="not_built",
            ) from e
        try:
            loaded = datasets.load_from_disk(str(path))
        except Exception as e:  # datasets raises many types for a broken directory
            raise TaskError(f"{where}: cannot load {path}: {e}", kind="unreadable") from e
        if isinstance(loaded, datasets.DatasetDict):
            return [(name, loaded[name].to_list()) for name in loaded]
        return [(None, loaded.to_list())]
    files = _parquet_files(path)
    if not files:
        raise TaskError(
            f"{where}: {path} is neither a save_to_disk directory nor Parquet (no *.parquet files)",
            kind="unreadable",
        )
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for file in files:
        try:
            rows.extend(pq.read_table(file).to_pylist())
        except Exception as e:  # pyarrow raises ArrowInvalid, OSError, ...
            raise TaskError(f"{where}: {file}: not a readable Parquet file: {e}", kind="unreadable") from e
    return [(None, rows)]


def hf_tasks(arg: str) -> list[Task]:
    """The tasks of `hf:ARG` (see the module docstring), in row order."""
    where = f"hf:{arg}"
    path, mapping = parse_spec(arg)
    parts = read_parts(path, where)
    if "part" in mapping:
        names = [name for name, _ in parts]
        chosen = [part for part in parts if part[0] == mapping["part"]]
        if not chosen:
            raise TaskError(
                f"{where}: part {mapping['part']!r} not in the dataset; it has {names}", kind="bad_spec"
            )
        parts = chosen
    tasks: list[Task] = []
    for name, rows in parts:
        label = f"{where} [{name}]" if name is not None else where
        if not mapping:
            tasks += [_task_row(row, f"{label} row {i}") for i, row in enumerate(rows)]
        else:
            tasks += [_mapped(row, mapping, name, f"{label} row {i}") for i, row in enumerate(rows)]
    if not tasks:
        raise TaskError(f"{where}: the dataset has no rows", kind="empty")
    return tasks


def _task_row(row: dict[str, Any], where: str) -> Task:
    missing = [c for c in ("domain", "prompt", "verifier") if c not in row]
    if missing:
        raise TaskError(
            f"{where}: not a trialground task row (no {', '.join(missing)} column; its columns: "
            f"{', '.join(row)}); give a column mapping, e.g. ?prompt=question&answer=answer",
            kind="bad_spec",
        )
    data: dict[str, Any] = {}
    for key, value in row.items():
        if key in JSON_COLUMNS and isinstance(value, str):
            try:
                data[key] = json.loads(value)
            except json.JSONDecodeError as e:
                raise TaskError(
                    f"{where}: {key}: not JSON ({e.msg} at char {e.pos})", kind="invalid_task"
                ) from e
        elif key in JSON_COLUMNS or key in TEXT_COLUMNS:
            if value is not None or key in ("reference", "limits"):
                data[key] = value
        else:
            raise TaskError(f"{where}: {key}: not a task field", kind="invalid_task")
    return task_from_dict(data, where)


def _column(row: dict[str, Any], column: str, where: str) -> Any:
    if column not in row:
        raise TaskError(f"{where}: no column {column!r}; the dataset has {', '.join(row)}", kind="bad_spec")
    return row[column]


def _text(value: Any, column: str, where: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int | float) or not str(value).strip():
        raise TaskError(f"{where}: {column}: expected non-empty text, got {value!r}", kind="invalid_task")
    return str(value)


def _mapped(row: dict[str, Any], mapping: dict[str, str], part: str | None, where: str) -> Task:
    if "prompt" not in mapping or "answer" not in mapping:
        raise TaskError(f"{where}: the mapping needs prompt=COLUMN and answer=COLUMN", kind="bad_spec")
    kind = mapping.get("verifier", "exact")
    if kind not in ANSWER_VERIFIERS:
        raise TaskError(
            f"{where}: verifier must be one of {', '.join(ANSWER_VERIFIERS)}, got {kind!r}", kind="bad_spec"
        )
    prompt = _text(_column(row, mapping["prompt"], where), mapping["prompt"], where)
    answer = _text(_column(row, mapping["answer"], where), mapping["answer"], where)
    split = _split(row, mapping, part, where)
    metadata: dict[str, Any] = {}
    for column in filter(None, mapping.get("metadata", "").split(",")):
        value = _column(row, column, where)
        if not isinstance(value, _SCALARS):
            raise TaskError(f"{where}: {column}: metadata columns must hold scalars", kind="invalid_task")
        metadata[column] = value
    if kind == "math":
        task = math_task(prompt, answer, split=split, metadata={"source": "hf", **metadata})
        return task if "domain" not in mapping else task.model_copy(update={"domain": mapping["domain"]})
    params: dict[str, Any] = {"pattern": answer} if kind == "regex" else {"answer": answer}
    if kind == "numeric":
        try:
            params = {
                "answer": float(answer),
                "rel_tol": float(mapping.get("rel_tol", 1e-6)),
                "abs_tol": float(mapping.get("abs_tol", 1e-9)),
            }
        except ValueError as e:
            raise TaskError(f"{where}: numeric: {e}", kind="invalid_task") from e
    if kind == "exact" and "case_sensitive" in mapping:
        flag = mapping["case_sensitive"].lower()
        if flag not in ("true", "false"):
            raise TaskError(f"{where}: case_sensitive must be true or false, got {flag!r}", kind="bad_spec")
        params["case_sensitive"] = flag == "true"
    return Task(
        domain=mapping.get("domain", "qa"),
        prompt=prompt,
        reference=answer,
        verifier=VerifierSpec(kind=kind, params=params),  # type: ignore[arg-type]  # checked above
        split=split,  # type: ignore[arg-type]  # checked in _split
        metadata={"source": "hf", **metadata},
    )


def _split(row: dict[str, Any], mapping: dict[str, str], part: str | None, where: str) -> str:
    given = mapping.get("split")
    if given is None:
        return "train" if part in (None, "train") else "eval"
    value = given if given in ("train", "eval") else _column(row, given, where)
    if value not in ("train", "eval"):
        raise TaskError(f"{where}: split: must be 'train' or 'eval', got {value!r}", kind="invalid_task")
    return str(value)


def task_rows(tasks: list[Task]) -> list[dict[str, Any]]:
    """The task-row form (see the module docstring) of each task."""
    rows = []
    for t in tasks:
        data = t.model_dump(mode="json")
        row = {key: data[key] for key in TEXT_COLUMNS}
        row.update({key: json.dumps(data[key], sort_keys=True) for key in JSON_COLUMNS})
        rows.append(row)
    return rows


def write_hf(tasks: list[Task], out: Path) -> None:
    """Write `tasks` as a dataset of task rows: `save_to_disk` into the directory `out`, or one Parquet
    file when `out` ends in `.parquet`. `hf:OUT` reads it back as the same tasks."""
    try:
        import datasets
    except ImportError as e:
        raise TaskError(
            "--format hf needs `datasets` (pip install 'trialground[hf]')", kind="not_built"
        ) from e
    features = datasets.Features({key: datasets.Value("string") for key in (*TEXT_COLUMNS, *JSON_COLUMNS)})
    dataset = datasets.Dataset.from_list(task_rows(tasks), features=features)
    bars = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # a CLI's stderr is for what went wrong, not a shard-writing bar
    try:
        if out.suffix == ".parquet":
            out.parent.mkdir(parents=True, exist_ok=True)
            dataset.to_parquet(str(out))
        else:
            dataset.save_to_disk(str(out))
    finally:
        if bars:
            datasets.enable_progress_bars()
