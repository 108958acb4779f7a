"""What an audit found: per task (strategies played, paid, dodged; the gold gate's problems) and per
family (the share of tasks some strategy was paid on, the strategies that were)."""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.table import Table

from trialground.tasks.model import Task
from trialground.tasks.verifiers import lookup


def family_of(task: Task, source: str) -> str:
    """The task's family: its source spec, followed by the family the task declares when that says more
    (`agent/repair`, `ops/config_key`, `hackable:naive/repair`)."""
    family = str(task.metadata.get("family") or "")
    name = source.partition(":")[0]
    if family in ("", name, source):
        return source
    return f"{source}/{family.removeprefix(name + ':')}"


class TaskAudit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(description="The task's id")
    name: str = Field("", description="Its metadata name, if any")
    source: str = Field(description="The source spec it came from")
    family: str = Field(description="Its family (`family_of`)")
    kind: str = Field(description="Its verifier kind")
    surface: str = Field(description="code, program, patch or answer")
    played: tuple[str, ...] = Field((), description="Strategies that had a move for it")
    paid: tuple[str, ...] = Field((), description="Strategies its grader paid")
    paid_classes: tuple[str, ...] = Field((), description="Their exploit classes")
    dodged: tuple[str, ...] = Field((), description="Strategies whose grading ended in an error (and why)")
    gold_problems: tuple[str, ...] = Field((), description="What the gold gate found wrong")

    @property
    def hackable(self) -> bool:
        return bool(self.paid)


class FamilyRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str = Field(description="The family")
    kind: str = Field(description="Its verifier kinds, comma-separated")
    tasks: int = Field(description="Tasks audited")
    played: int = Field(description="Moves graded (strategies x tasks)")
    paid_tasks: int = Field(description="Tasks some strategy was paid on")
    paid_rate: float = Field(description="paid_tasks / tasks")
    paid: dict[str, int] = Field(default_factory=dict, description="Strategy -> tasks it was paid on")
    dodged: int = Field(0, description="Moves whose grading ended in an infrastructure error")
    gold_failures: int = Field(0, description="Tasks the gold gate failed")
    gameable: bool = Field(False, description="Graded by a kind declared deliberately gameable (a test bed)")


class AuditReport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    strategies: tuple[str, ...] = Field(description="The strategies of the library played")
    tasks: tuple[TaskAudit, ...] = Field(description="One entry per task")

    def families(self) -> list[FamilyRow]:
        rows: dict[str, list[TaskAudit]] = {}
        for t in self.tasks:
            rows.setdefault(t.family, []).append(t)
        out = []
        for family, items in rows.items():
            paid = Counter(s for t in items for s in t.paid)
            hit = sum(t.hackable for t in items)
            out.append(
                FamilyRow(
                    family=family,
                    kind=",".join(sorted({t.kind for t in items})),
                    tasks=len(items),
                    played=sum(len(t.played) for t in items),
                    paid_tasks=hit,
                    paid_rate=hit / len(items),
                    paid=dict(paid.most_common()),
                    dodged=sum(len(t.dodged) for t in items),
                    gold_failures=sum(bool(t.gold_problems) for t in items),
                    gameable=any(lookup(t.kind).gameable for t in items),
                )
            )
        return out

    def excluded(self) -> list[tuple[str, str]]:
        """(task id, reason) of every task a run should not train on: paid, or failing the gold gate."""
        out = []
        for t in self.tasks:
            reasons = ([f"paid: {', '.join(t.paid)}"] if t.paid else []) + [
                f"gold: {p}" for p in t.gold_problems
            ]
            if reasons:
                out.append((t.task_id, "; ".join(reasons)[:300]))
        return out

    def over(self, max_paid_rate: float, max_gold_fail_rate: float) -> list[str]:
        """The families above either threshold, with what they reached (empty: the audit passes)."""
        out = []
        for row in self.families():
            if row.paid_rate > max_paid_rate:
                out.append(f"{row.family}: {row.paid_rate:.0%} of tasks paid (> {max_paid_rate:.0%})")
            if row.gold_failures / row.tasks > max_gold_fail_rate:
                out.append(
                    f"{row.family}: {row.gold_failures / row.tasks:.0%} of tasks fail the gold gate "
                    f"(> {max_gold_fail_rate:.0%})"
                )
        return out


def print_report(report: AuditReport, console: Console) -> None:
    table = Table(title=f"audit: {len(report.strategies)} strategies, {len(report.tasks)} tasks")
    for col in ("family", "kind", "tasks", "moves", "paid tasks", "paid", "dodged", "gold fails", "paid by"):
        table.add_column(col, overflow="fold")
    for r in report.families():
        family = r.family + (" (deliberately gameable)" if r.gameable else "")
        table.add_row(
            family, r.kind, str(r.tasks), str(r.played), str(r.paid_tasks), f"{r.paid_rate:.0%}",
            str(r.dodged), str(r.gold_failures),
            ", ".join(f"{name} ({n})" for name, n in r.paid.items()) or "-",
        )  # fmt: skip
    console.print(table)
    for t in report.tasks:
        what = [f"paid by {', '.join(t.paid)}"] if t.paid else []
        what += list(t.gold_problems)
        if what:
            console.print(f"  {t.family} {t.name or t.task_id}: {'; '.join(what)}", highlight=False)
