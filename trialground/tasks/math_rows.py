"""One math problem and its gold answer as a task: what the `math` family's files and the `hf` source's
math mapping both make (domain `math`, verifier `math` with `params={"answer": gold}`, reference
`\\boxed{gold}`, the form the prompt asks for)."""

from __future__ import annotations

from trialground.tasks.model import Task, VerifierSpec

INSTRUCTION = "\n\nPut your final answer in \\boxed{}."


def math_task(problem: str, answer: str, *, split: str = "train", metadata: dict | None = None) -> Task:
    return Task(
        domain="math",
        prompt=problem + INSTRUCTION,
        reference=f"\\boxed{{{answer}}}",
        verifier=VerifierSpec(kind="math", params={"answer": answer}),
        split=split,  # type: ignore[arg-type]  # validated by Task
        metadata={"source": "math", **(metadata or {})},
    )
