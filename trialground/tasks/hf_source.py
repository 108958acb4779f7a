"""`hf:PATH[?MAPPING]`: tasks from a local Hugging Face dataset, and `write_hf` to export tasks as one.

PATH is a directory written by `datasets.Dataset.save_to_disk` (or `DatasetDict.save_to_disk`), a
`.parquet` or `.jsonl` file, or a directory of `.parquet` files (read in name order; the layout of a dataset
downloaded from the Hub), else of `.jsonl` files. Rows are read in order. Hub names are not fetched.

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

  Code datasets (`format=mbpp` or `format=apps`, or `verifier=code_tests` with `tests=COLUMN`) become
  `code_tests` tasks (`check_program` for APPS's stdin/stdout rows), built by `code_rows.py`, with the keys
  `tests`, `setup`, `reference` (columns; defaults per format) and `show_tests` (how many tests the
  prompt shows, default 1).

  e.g. `hf:data/gsm8k?prompt=question&answer=final&verifier=numeric&split=eval` or
  `hf:data/mbpp?format=mbpp`. The prompt is the column's text as it is; the verifier takes the answer from
  the completion's last `\\boxed{}`, else its last `Answer:` line, else the whole text. A `math` task is
  built as the `math` source builds one (prompt + "Put your final answer in \\boxed{}."). A `DatasetDict`
  part named `train` gives train tasks and any other part eval tasks, unless `split` says otherwise.

Errors raise `TaskError` naming the spec and, for a row, `row N` (0-based) and the column: a missing
column lists the dataset's columns; an unknown key lists the known ones. Nothing is skipped silently.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from trialground.errors import TaskError
from trialground.tasks import code_rows
from trialground.tasks.io import task_from_dict
from trialground.tasks.math_rows import math_task
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
    "format",
    "tests",
    "setup",
    "reference",
    "show_tests",
)
ANSWER_VERIFIERS = ("exact", "math", "numeric", "regex")
CODE_FORMATS = ("mbpp", "apps")
# a code format's columns when the mapping does not name them: the first one the row has
_CODE_COLUMNS: dict[str, dict[str, tuple[str, ...]]] = {
    "mbpp": {
        "prompt": ("text", "prompt"),
        "tests": ("test_list",),
        "setup": ("test_setup_code", "test_imports"),
        "reference": ("code",),
    },
    "apps": {"prompt": ("question", "prompt"), "tests": ("input_output",), "reference": ("solutions",)},
}
CODE_PROMPT = (
    "{text}\n\n{shown}Write the complete Python {what}; it is saved as {path}. Put it in one ```python block."
)
MODULE = "module"
PROGRAM = "program (it reads standard input and prints to standard output)"
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
    hub = ""
    if not path.is_absolute() and not str(path).startswith(".") and len(path.parts) <= 2:
        local = f"data/{path.name}"
        hub = (
            f". {path} looks like a Hugging Face Hub name: hf: reads only local datasets (a save_to_disk "
            f"directory, a .parquet or .jsonl file, or a directory of them), so a run works offline and "
            f'reads the same rows every time. Make one once, e.g. `python -c "import datasets; '
            f"datasets.load_dataset('{path}').save_to_disk('{local}')\"` (add the config name for a dataset "
            f"that has several, e.g. load_dataset('{path}', 'main')), or `hf download {path} --repo-type "
            f"dataset --local-dir {local}` (its Parquet files; name one config's folder if it has several); "
            f"then use hf:{local}"
        )
    raise TaskError(f"hf:{arg}: {path} does not exist{hub}", kind="unreadable")


def _data_files(path: Path) -> list[Path]:
    """The Parquet files of `path` (itself, or those beneath it in name order), else its JSON Lines ones."""
    if path.is_file():
        return [path]
    for pattern in ("*.parquet", "*.jsonl"):
        files = sorted(p for p in path.rglob(pattern) if p.is_file())
        if files:
            return files
    return []


def _jsonl_rows(file: Path, where: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with file.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskError(f"{where}: {file} line {n}: not JSON ({e.msg})", kind="unreadable") from e
            if not isinstance(row, dict):
                raise TaskError(f"{where}: {file} line {n}: not a JSON object", kind="unreadable")
            rows.append(row)
    return rows


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
    files = _data_files(path)
    if not files:
        raise TaskError(
            f"{where}: {path} is neither a save_to_disk directory nor Parquet or JSON Lines (no *.parquet or "
            "*.jsonl files)",
            kind="unreadable",
        )
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for file in files:
        if file.suffix in (".jsonl", ".json"):
            rows.extend(_jsonl_rows(file, where))
            continue
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
    if "format" in mapping or mapping.get("verifier") == "code_tests":
        return _code_task(row, mapping, part, where)
    if "prompt" not in mapping or "answer" not in mapping:
        raise TaskError(f"{where}: the mapping needs prompt=COLUMN and answer=COLUMN", kind="bad_spec")
    code_only = [k for k in ("tests", "setup", "reference", "show_tests") if k in mapping]
    if code_only:
        raise TaskError(
            f"{where}: {', '.join(code_only)} go with code tasks (format=mbpp or apps)", kind="bad_spec"
        )
    kind = mapping.get("verifier", "exact")
    if kind not in ANSWER_VERIFIERS:
        raise TaskError(
            f"{where}: verifier must be one of {', '.join(ANSWER_VERIFIERS)}, got {kind!r}", kind="bad_spec"
        )
    prompt = _text(_column(row, mapping["prompt"], where), mapping["prompt"], where)
    answer = _text(_column(row, mapping["answer"], where), mapping["answer"], where)
    split = _split(row, mapping, part, where)
    metadata = _metadata(row, mapping, where)
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


def _code_column(row: dict[str, Any], mapping: dict[str, str], key: str, where: str) -> str | None:
    """The column `key` (prompt, tests, setup, reference) is read from: the mapping's, else the format's
    first column the row has (None for an optional one it lacks)."""
    if key in mapping:
        return mapping[key]
    for column in _CODE_COLUMNS.get(mapping.get("format", ""), {}).get(key, ()):
        if column in row:
            return column
    if key in ("prompt", "tests"):
        raise TaskError(
            f"{where}: name the {key} column ({key}=COLUMN); the dataset has {', '.join(row)}",
            kind="bad_spec",
        )
    return None


def _code_task(row: dict[str, Any], mapping: dict[str, str], part: str | None, where: str) -> Task:
    """A code row as a task (`code_rows.py`): MBPP-style asserts (`format=mbpp`, or `verifier=code_tests`
    with `tests=COLUMN`) or APPS-style input/output pairs (`format=apps`)."""
    fmt = mapping.get("format", "mbpp")
    if fmt not in CODE_FORMATS:
        raise TaskError(
            f"{where}: format must be one of {', '.join(CODE_FORMATS)}, got {fmt!r}", kind="bad_spec"
        )
    if mapping.get("verifier", "code_tests") != "code_tests" or "answer" in mapping:
        raise TaskError(
            f"{where}: format={fmt} makes code tasks graded by their tests (tests=COLUMN): drop verifier= "
            "and answer=",
            kind="bad_spec",
        )
    try:
        shown_n = int(mapping.get("show_tests", "1"))
        if shown_n < 0:
            raise ValueError
    except ValueError:
        raise TaskError(
            f"{where}: show_tests must be a count >= 0, got {mapping['show_tests']!r}", kind="bad_spec"
        ) from None
    columns = {
        key: _code_column(row, mapping, key, where) for key in ("prompt", "tests", "setup", "reference")
    }
    text = _text(_column(row, str(columns["prompt"]), where), str(columns["prompt"]), where)
    tests = _column(row, str(columns["tests"]), where)
    reference = _reference(row, columns["reference"], where)
    metadata = {"source": "hf", "format": fmt, **_metadata(row, mapping, where)}
    split = _split(row, mapping, part, where)
    label = f"{where}: {columns['tests']}"
    if fmt == "apps":
        inputs, outputs, fn_name = code_rows.io_pairs(tests, label)
        if fn_name is None:
            examples = [
                f"input:\n{code_rows.as_text(i)}\noutput:\n{code_rows.as_text(o)}"
                for i, o in zip(inputs[:shown_n], outputs[:shown_n], strict=True)
            ]
            shown = "".join(f"Example {n}:\n```\n{e}\n```\n\n" for n, e in enumerate(examples, start=1))
            return Task(
                domain="code",
                prompt=CODE_PROMPT.format(
                    text=text.rstrip(), shown=shown, what=PROGRAM, path=code_rows.SOLUTION
                ),
                hidden_checks=code_rows.io_checks(inputs, outputs),
                reference=reference,
                verifier=VerifierSpec(kind="check_program", params={"solution_path": code_rows.SOLUTION}),
                split=split,  # type: ignore[arg-type]  # checked in _split
                metadata=metadata,
            )
        hidden, entry = code_rows.io_test_file(inputs, outputs, fn_name), fn_name
        count = len(inputs)
        shown_tests = [
            f"{fn_name}(*{i!r})  # returns {o!r}"
            for i, o in zip(inputs[:shown_n], outputs[:shown_n], strict=True)
        ]
    else:
        snippets, extra = code_rows.split_tests(tests, label)
        setup_column = columns["setup"]
        setup = code_rows.setup_text(
            row.get(setup_column) if setup_column else None, f"{where}: {setup_column}"
        )
        setup = "\n".join(filter(None, (setup.strip(), extra)))
        hidden, functions = code_rows.assert_test_file(snippets, setup, label)
        if not functions:
            raise TaskError(f"{label}: the tests call no function of the submission", kind="invalid_task")
        entry, count, shown_tests = functions[0], len(snippets), list(snippets[:shown_n])
    shown = (
        "Your code should pass tests like:\n```python\n" + "\n".join(shown_tests) + "\n```\n\n"
        if shown_tests
        else ""
    )
    return Task(
        domain="code",
        prompt=CODE_PROMPT.format(text=text.rstrip(), shown=shown, what=MODULE, path=code_rows.SOLUTION),
        hidden_checks={code_rows.HIDDEN: hidden},
        reference=reference,
        verifier=VerifierSpec(
            kind="code_tests",
            params={"solution_path": code_rows.SOLUTION, "expected_tests": count, "entry_point": entry},
        ),
        split=split,  # type: ignore[arg-type]  # checked in _split
        metadata=metadata,
    )


def _reference(row: dict[str, Any], column: str | None, where: str) -> str | None:
    """The reference solution: the column's text, or the first of a list (APPS stores a JSON list)."""
    if column is None:
        return None
    value = _column(row, column, where)
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, list):
        value = next((v for v in value if isinstance(v, str) and v.strip()), None)
    return value if isinstance(value, str) and value.strip() else None


def _metadata(row: dict[str, Any], mapping: dict[str, str], where: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for column in filter(None, mapping.get("metadata", "").split(",")):
        value = _column(row, column, where)
        if not isinstance(value, _SCALARS):
            raise TaskError(f"{where}: {column}: metadata columns must hold scalars", kind="invalid_task")
        metadata[column] = value
    return metadata


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
