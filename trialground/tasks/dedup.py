"""Duplicates in a task set and overlap with an evaluation set. Pure functions returning typed findings.

- `exact_duplicates`: tasks with the same id (identical content) or the same prompt up to whitespace and
  case.
- `near_duplicates`: MinHash over word n-grams with LSH banding proposes candidate pairs; each candidate
  is confirmed by the exact Jaccard similarity of the n-gram sets; confirmed pairs are merged into
  clusters (one finding per cluster).
- `eval_overlap`: n-gram overlap with a named evaluation set (contamination), scored per pair as the
  share of the eval prompt's non-template n-grams found in the task's prompt or reference.
- `decontaminate`: the training set without the evaluation set: tasks whose normalised content
  (`content_key`: NFKC, whitespace collapsed, trimmed) equals an evaluation task's, and tasks that cover
  an evaluation task (`eval_contamination`'s test), are removed and counted.

Template text shared by most tasks of a set ("Submit the complete module ...") would make every pair
look alike, so n-grams found in more than `max_df` of the texts are ignored when there are at least
`MIN_DOCS_FOR_DF` texts. Texts are lower-cased and split into words and single punctuation characters.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trialground.tasks.model import Task
from trialground.tasks.verifiers import repository_task

MIN_DOCS_FOR_DF = 10
_MAX_PROBES = 16
_TOKEN = re.compile(r"\w+|[^\w\s]")

TextOf = Callable[[Task], str]


class DedupFinding(BaseModel):
    """A group of tasks that repeat each other (or a task that repeats evaluation tasks)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["same_task", "same_prompt", "near_duplicate", "eval_overlap"]
    task_ids: tuple[str, ...] = Field(description="The tasks involved, first = the one to keep")
    eval_ids: tuple[str, ...] = Field((), description="For eval_overlap: the evaluation tasks overlapped")
    similarity: float = Field(ge=0.0, le=1.0, description="Lowest confirmed similarity in the group")
    detail: str = ""


def prompt_text(task: Task) -> str:
    return task.prompt


def prompt_and_reference(task: Task) -> str:
    return f"{task.prompt}\n{task.reference or ''}"


def content_texts(tasks: Sequence[Task]) -> list[str]:
    """Prompt, own workspace files and reference of each task. A file whose exact content several tasks
    share (a service's source, a README) says nothing about whether the tasks differ, so it is left out;
    two data tasks with one question template but different tables are not duplicates."""
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for t in tasks:
        for item in t.files.items():
            seen[item] += 1
    out = []
    for t in tasks:
        if repository_task(t.verifier.kind):  # one repository, bugs a line apart: the patch is what differs
            out.append(f"{t.prompt}\n{t.reference or ''}")
            continue
        own = "\n".join(text for path, text in sorted(t.files.items()) if seen[(path, text)] == 1)
        out.append(f"{t.prompt}\n{own}\n{t.reference or ''}")
    return out


def words(text: str) -> list[str]:
    """Lower-cased tokens: words, and each punctuation character on its own ("<>" and "()" differ)."""
    return _TOKEN.findall(text.lower())


def shingles(text: str, n: int) -> set[str]:
    """Word n-grams; a text shorter than n words is one shingle (so short texts still compare)."""
    w = words(text)
    if len(w) < n:
        return {" ".join(w)} if w else set()
    return {" ".join(w[i : i + n]) for i in range(len(w) - n + 1)}


def _drop_common(sets: list[set[str]], max_df: float) -> tuple[list[set[str]], set[str]]:
    """The sets without n-grams found in more than `max_df` of them (a set never becomes empty), and
    those common n-grams."""
    if len(sets) < MIN_DOCS_FOR_DF:
        return sets, set()
    df: dict[str, int] = defaultdict(int)
    for s in sets:
        for g in s:
            df[g] += 1
    limit = max_df * len(sets)
    common = {g for g, c in df.items() if c > limit}
    return [s - common if len(s - common) else s for s in sets], common


def jaccard(a: set[str], b: set[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class MinHasher:
    """MinHash signatures: `num_perm` hash functions h_i(x) = splitmix64(x XOR s_i) of 64-bit shingle
    hashes. (Linear hashes (a*x + b) mod p proved biased here: min-wise estimates off by 0.1.)"""

    def __init__(self, num_perm: int = 128, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.salts = rng.integers(0, np.iinfo(np.uint64).max, size=num_perm, dtype=np.uint64)  # [P]
        self.num_perm = num_perm

    @staticmethod
    def _mix(z: np.ndarray) -> np.ndarray:
        # splitmix64 finaliser; uint64 arithmetic wraps modulo 2^64 on purpose.
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))

    def signature(self, grams: set[str]) -> np.ndarray:
        """[P] uint64; all-max for an empty set."""
        if not grams:
            return np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        x = np.fromiter(
            (int.from_bytes(hashlib.blake2b(g.encode(), digest_size=8).digest(), "little") for g in grams),
            dtype=np.uint64,
            count=len(grams),
        )  # [S]
        with np.errstate(over="ignore"):
            h = self._mix(x[:, None] ^ self.salts[None, :])  # [S, P]
        return h.min(axis=0)


def exact_duplicates(tasks: Sequence[Task]) -> list[DedupFinding]:
    """Groups of tasks with the same id, then groups with the same normalised prompt and the same
    workspace (files and visible checks; other content differing): the policy would see the same
    question twice. Tool tasks whose prompt is a template and whose workspace differs are different."""
    findings: list[DedupFinding] = []
    by_id: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tasks):
        by_id[t.id].append(i)
    for tid, idx in by_id.items():
        if len(idx) > 1:
            findings.append(
                DedupFinding(
                    kind="same_task",
                    task_ids=(tid,) * len(idx),
                    similarity=1.0,
                    detail=f"task {tid} appears {len(idx)} times (positions {idx[:10]})",
                )
            )
    by_prompt: dict[str, list[str]] = defaultdict(list)
    for tid in by_id:
        # Whitespace and case only: punctuation can be the whole difference (HumanEval/56 "<>" vs /61 "()").
        t = tasks[by_id[tid][0]]
        seen = " ".join(t.prompt.split()).casefold() + repr(sorted({**t.files, **t.visible_checks}.items()))
        by_prompt[seen].append(tid)
    for ids in by_prompt.values():
        if len(ids) > 1:
            findings.append(
                DedupFinding(
                    kind="same_prompt",
                    task_ids=tuple(ids),
                    similarity=1.0,
                    detail=f"{len(ids)} different tasks share one prompt",
                )
            )
    return findings


def near_duplicates(
    tasks: Sequence[Task],
    *,
    threshold: float = 0.9,
    ngram: int = 3,
    num_perm: int = 128,
    bands: int = 32,
    max_df: float = 0.5,
    seed: int = 0,
    text: TextOf | None = None,
) -> list[DedupFinding]:
    """Clusters of distinct tasks whose n-gram Jaccard similarity is >= `threshold` (identical texts are
    left to `exact_duplicates`). `text` picks what is compared (default: `content_texts`). 0.9 flags
    near-copies; templated generators produce pairs at 0.8-0.85 that differ in one number or word and are
    different tasks, so lower it with care."""
    if num_perm % bands:
        raise ValueError(f"num_perm ({num_perm}) must be a multiple of bands ({bands})")
    first: dict[str, Task] = {}
    for t in tasks:
        first.setdefault(t.id, t)
    uniq = list(first.values())
    texts = content_texts(uniq) if text is None else [text(t) for t in uniq]
    normal = [" ".join(x.split()).casefold() for x in texts]
    sets, _ = _drop_common([shingles(x, ngram) for x in texts], max_df)
    hasher = MinHasher(num_perm, seed)
    sigs = np.stack([hasher.signature(s) for s in sets]) if uniq else np.zeros((0, num_perm))  # [N, P]
    rows = num_perm // bands
    parent = list(range(len(uniq)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    weakest: dict[int, float] = {}
    for band in range(bands):
        buckets: dict[bytes, list[int]] = defaultdict(list)
        for i in range(len(uniq)):
            buckets[sigs[i, band * rows : (band + 1) * rows].tobytes()].append(i)
        for members in buckets.values():
            for pos, j in enumerate(members[1:], start=1):
                # Compare with one member of each cluster already in the bucket (at most _MAX_PROBES), so
                # a big bucket of one template costs O(k), not O(k^2).
                probes: dict[int, int] = {}
                for i in members[:pos]:
                    probes.setdefault(root(i), i)
                    if len(probes) >= _MAX_PROBES:
                        break
                for ri, i in probes.items():
                    rj = root(j)
                    if ri == rj or normal[i] == normal[j]:
                        continue
                    sim = jaccard(sets[i], sets[j])
                    if sim >= threshold:
                        parent[rj] = ri
                        weakest[ri] = min(sim, weakest.get(ri, 1.0), weakest.pop(rj, 1.0))
    clusters: dict[int, list[int]] = defaultdict(list)
    for i in range(len(uniq)):
        clusters[root(i)].append(i)
    out = []
    for r, members in clusters.items():
        if len(members) > 1:
            sim = weakest.get(r, threshold)
            out.append(
                DedupFinding(
                    kind="near_duplicate",
                    task_ids=tuple(uniq[i].id for i in sorted(members)),
                    similarity=round(sim, 4),
                    detail=f"{len(members)} tasks with {ngram}-gram Jaccard >= {sim:.2f}",
                )
            )
    return out


def eval_overlap(
    tasks: Sequence[Task],
    eval_tasks: Sequence[Task],
    *,
    ngram: int = 8,
    threshold: float = 0.7,
    max_df: float = 0.1,
    eval_name: str = "eval",
    text: TextOf = prompt_and_reference,
    eval_text: TextOf = prompt_text,
) -> list[DedupFinding]:
    """Tasks that contain an evaluation task's question: coverage = the eval prompt's (non-template)
    n-grams found in the task's prompt or reference / all of them, >= `threshold`. One finding per task,
    listing every evaluation task it covers.

    Template n-grams (instructions every prompt carries) are those found in more than
    max(`max_df` x texts, 3) of all texts, both sets together, when there are at least `MIN_DOCS_FOR_DF`
    texts; a leak shared by a few texts stays. An eval prompt made only of template keeps all its n-grams.
    A task that holds just a fragment of a longer eval question scores that fragment's share."""
    own = [shingles(text(t), ngram) for t in tasks]
    theirs = [shingles(eval_text(t), ngram) for t in eval_tasks]
    common: set[str] = set()
    total = len(own) + len(theirs)
    if total >= MIN_DOCS_FOR_DF:
        df: dict[str, int] = defaultdict(int)
        for grams in (*own, *theirs):
            for g in grams:
                df[g] += 1
        limit = max(max_df * total, 3)
        common = {g for g, c in df.items() if c > limit}
    eval_sets = [s - common or s for s in theirs]
    index: dict[str, list[int]] = defaultdict(list)
    for j, s in enumerate(eval_sets):
        for g in s:
            index[g].append(j)
    out = []
    for t, grams in zip(tasks, own, strict=True):
        shared: dict[int, int] = defaultdict(int)
        for g in grams:
            for j in index.get(g, ()):
                shared[j] += 1
        hits = sorted(
            (
                (count / len(eval_sets[j]), j)
                for j, count in shared.items()
                if count / len(eval_sets[j]) >= threshold
            ),
            key=lambda h: (-h[0], h[1]),
        )
        if hits:
            out.append(
                DedupFinding(
                    kind="eval_overlap",
                    task_ids=(t.id,),
                    eval_ids=tuple(eval_tasks[j].id for _, j in hits),
                    similarity=round(hits[0][0], 4),
                    detail=f"{hits[0][0]:.0%} of the {ngram}-grams of {eval_name} task "
                    f"{eval_tasks[hits[0][1]].id} appear in this task ({len(hits)} overlapped)",
                )
            )
    return out


def find_duplicates(
    tasks: Sequence[Task], eval_tasks: Sequence[Task] = (), *, eval_name: str = "eval"
) -> list[DedupFinding]:
    """Every finding with default settings: exact, near and (when given) evaluation-set overlap."""
    found = exact_duplicates(tasks) + near_duplicates(tasks)
    if eval_tasks:
        found += eval_overlap(tasks, eval_tasks, eval_name=eval_name)
    return found


class EvalContamination(BaseModel):
    """How much of an evaluation set its training set already holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    same_id: tuple[str, ...] = Field(description="Evaluation task ids also in training (identical tasks)")
    covered: tuple[str, ...] = Field(description="Evaluation task ids a training task covers (eval_overlap)")
    n_eval: int = Field(ge=0)

    @property
    def near_dup_frac(self) -> float:
        return len(self.covered) / max(1, self.n_eval)


def eval_contamination(
    train_tasks: Sequence[Task], eval_tasks: Sequence[Task], *, threshold: float = 0.9
) -> EvalContamination:
    """The run's start-up contamination check (`eval/overlap_same_id`, `eval/overlap_near_dup_frac`).

    Each task is compared by its instance: prompt, own workspace files (a file whose exact content several
    tasks share is left out, see `content_texts`) and reference, both sides alike, with the template
    n-grams of the two sets removed (`eval_overlap`). Two instances of one template (the same prompt, a
    different key, table or broken line) are therefore distinct; a training task that holds an eval task's
    question, files or answer is not."""
    train_ids = {t.id for t in train_tasks}
    same = tuple(sorted({t.id for t in eval_tasks if t.id in train_ids}))
    rest = [t for t in eval_tasks if t.id not in train_ids]
    both = [*train_tasks, *rest]
    instance = dict(zip((t.id for t in both), content_texts(both), strict=True))
    found = eval_overlap(
        train_tasks,
        rest,
        threshold=threshold,
        text=lambda t: instance[t.id],
        eval_text=lambda t: instance[t.id],
    )
    covered = tuple(sorted({e for f in found for e in f.eval_ids}))
    return EvalContamination(same_id=same, covered=covered, n_eval=len(eval_tasks))


def _norm(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def content_key(task: Task) -> str:
    """A hash of what defines a task with every text normalised (NFKC, runs of whitespace as one space,
    trimmed): a copy that differs only in spacing has the same key. Split, id and metadata are left out."""
    body = {
        "domain": _norm(task.domain),
        "prompt": _norm(task.prompt),
        "reference": _norm(task.reference or ""),
        "verifier": task.verifier.model_dump(mode="json"),
        **{
            field: sorted((_norm(k), _norm(v)) for k, v in getattr(task, field).items())
            for field in ("files", "visible_checks", "hidden_checks")
        },
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Decontamination(BaseModel):
    """What `decontaminate` removed from a training set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    removed_copies: tuple[str, ...] = Field(
        description="Training task ids equal to an eval task (normalised)"
    )
    removed_near: tuple[str, ...] = Field(description="Training task ids that cover an eval task")
    covered_eval: tuple[str, ...] = Field(description="Evaluation task ids a removed near-duplicate covered")

    def metrics(self) -> dict[str, float]:
        """`tasks/removed_eval_copies`, `tasks/removed_eval_near_dups`, `tasks/eval_covered_before`."""
        return {
            "tasks/removed_eval_copies": float(len(self.removed_copies)),
            "tasks/removed_eval_near_dups": float(len(self.removed_near)),
            "tasks/eval_covered_before": float(len(self.covered_eval)),
        }


def decontaminate(
    train_tasks: Sequence[Task], eval_tasks: Sequence[Task], *, threshold: float = 0.9
) -> tuple[list[Task], Decontamination]:
    """`train_tasks` without the evaluation set: first every task whose `content_key` (or id) is an eval
    task's, then every task that covers an eval task by `eval_contamination`'s measure."""
    keys = {content_key(t) for t in eval_tasks} | {t.id for t in eval_tasks}
    copies = [t for t in train_tasks if t.id in keys or content_key(t) in keys]
    copy_ids = {t.id for t in copies}
    rest = [t for t in train_tasks if t.id not in copy_ids]
    near: set[str] = set()
    covered: set[str] = set()
    if rest and eval_tasks:
        both = [*rest, *eval_tasks]
        instance = dict(zip((id(t) for t in both), content_texts(both), strict=True))
        for f in eval_overlap(
            rest,
            eval_tasks,
            threshold=threshold,
            text=lambda t: instance[id(t)],
            eval_text=lambda t: instance[id(t)],
        ):
            near.update(f.task_ids)
            covered.update(f.eval_ids)
    kept = [t for t in rest if t.id not in near]
    report = Decontamination(
        removed_copies=tuple(sorted(copy_ids)),
        removed_near=tuple(sorted(near)),
        covered_eval=tuple(sorted(covered)),
    )
    return kept, report
