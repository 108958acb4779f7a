"""exact / regex / numeric verifiers and answer extraction."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from trialground.errors import VerifierError
from trialground.tasks.model import Task, VerifierSpec
from trialground.verify.kinds.answers import (
    extract_answer,
    last_boxed,
    parse_number,
    verify_exact,
    verify_numeric,
    verify_regex,
)


def task(kind: str, **params: object) -> Task:
    return Task(domain="qa", prompt="q", verifier=VerifierSpec(kind=kind, params=params))  # type: ignore[arg-type]


def test_extraction_order() -> None:
    assert last_boxed(r"a \boxed{1} b \boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert extract_answer("work...\nAnswer: 42\nmore\nAnswer: 43") == "43"
    assert extract_answer("Final answer: yes") == "yes"
    assert extract_answer(r"Answer: 3 but \boxed{4}") == "4"
    assert extract_answer("  just text  ") == "just text"
    assert extract_answer(r"\boxed{x}", mode="whole") == r"\boxed{x}"


def test_exact_normalises_but_never_pays_substrings() -> None:
    t = task("exact", answer="Paris")
    assert verify_exact(t, "Answer: paris.").passed
    assert verify_exact(t, '"PARIS"').passed
    assert not verify_exact(t, "Answer: Paris, France").passed
    assert not verify_exact(t, "").passed
    assert verify_exact(task("exact", answer=["a", "b"]), "Answer: B").passed
    assert not verify_exact(task("exact", answer="Paris", case_sensitive=True), "Answer: paris").passed


def test_regex_full_match() -> None:
    t = task("regex", pattern=r"\d{3}-\d{4}")
    assert verify_regex(t, "Answer: 555-1234").passed
    assert not verify_regex(t, "Answer: call 555-1234 now").passed
    with pytest.raises(VerifierError):
        verify_regex(task("regex", pattern="("), "x")


def test_numeric_tolerance() -> None:
    t = task("numeric", answer=3.14159, rel_tol=1e-3)
    assert verify_numeric(t, r"\boxed{3.1416}").passed
    assert not verify_numeric(t, r"\boxed{3.2}").passed
    assert verify_numeric(task("numeric", answer="1,234"), "Answer: 1234").passed
    assert verify_numeric(task("numeric", answer=0.75), "Answer: 3/4").passed
    assert not verify_numeric(task("numeric", answer=1), "Answer: one").passed
    assert parse_number("nan") is None
    with pytest.raises(ValidationError, match="verifier 'numeric' params: answer: Field required"):
        task("numeric")  # a task without its gold answer is never made
