"""Small integer programs in words and code: the step vocabulary the `codegen` and `agent` families share.

A step is an `Op` with a constant and a phrase index; `words` states steps in English, `outputs` runs the
code lines on inputs (the same expression text as a reference solution, compiled once per line). Shared by
family folders that none imports another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Op:
    """One step: its name, the words that state it (`{c}` = constant), the code line, its constants."""

    name: str
    phrases: tuple[str, ...]
    code: str
    consts: tuple[int, ...] = ()


_DIGITS = tuple(range(1, 10))
INT_OPS: tuple[Op, ...] = (
    Op("add", ("add {c}", "increase it by {c}"), "x = x + {c}", _DIGITS),
    Op("sub", ("subtract {c}", "decrease it by {c}"), "x = x - {c}", _DIGITS),
    Op("mul", ("multiply by {c}", "multiply it by {c}"), "x = x * {c}", tuple(range(2, 10))),
    Op("div", ("floor-divide by {c}", "divide it by {c} rounding down"), "x = x // {c}", tuple(range(2, 10))),
    Op("mod", ("take it mod {c}", "take the remainder mod {c}"), "x = x % {c}", tuple(range(2, 10))),
    Op("max", ("raise it to at least {c}", "take the max with {c}"), "x = max(x, {c})", _DIGITS),
    Op("min", ("cap it at {c}", "take the min with {c}"), "x = min(x, {c})", _DIGITS),
    Op("square", ("square it",), "x = x * x"),
    Op("neg", ("negate it",), "x = -x"),
    Op("abs", ("take the absolute value",), "x = abs(x)"),
)
LIST_OPS: tuple[Op, ...] = (
    Op("add", ("add {c} to each element",), "xs = [v + {c} for v in xs]", _DIGITS),
    Op("sub", ("subtract {c} from each element",), "xs = [v - {c} for v in xs]", _DIGITS),
    Op("mul", ("multiply each element by {c}",), "xs = [v * {c} for v in xs]", tuple(range(2, 10))),
    Op("mod", ("take each element mod {c}",), "xs = [v % {c} for v in xs]", tuple(range(2, 10))),
    Op("gt", ("keep elements greater than {c}",), "xs = [v for v in xs if v > {c}]", _DIGITS),
    Op("lt", ("keep elements less than {c}",), "xs = [v for v in xs if v < {c}]", _DIGITS),
    Op("even", ("keep the even elements",), "xs = [v for v in xs if v % 2 == 0]"),
    Op("odd", ("keep the odd elements",), "xs = [v for v in xs if v % 2 == 1]"),
)
LIST_REDUCERS: tuple[Op, ...] = (
    Op("sum", ("return the sum",), "return sum(xs)"),
    Op("len", ("return the count",), "return len(xs)"),
    Op("max", ("return the maximum, or 0 if empty",), "return max(xs, default=0)"),
    Op("list", ("return the list",), "return xs"),
)


@functools.cache
def _line_fn(line: str) -> Callable[[Any], Any]:
    """A code line (`x = EXPR`, `xs = EXPR`, `return EXPR`) as a function of the variable, compiled once:
    the same expression text as the reference solution, without exec'ing whole programs per instance."""
    target, expr = line.split(" = ", 1) if not line.startswith("return ") else ("xs", line[len("return ") :])
    return eval(f"lambda {target.strip()}: {expr}")  # our own op table, never a submission


def outputs(lines: list[str], inputs: list[object]) -> list[str]:
    out = []
    for x in inputs:
        value = list(x) if isinstance(x, list) else x
        for line in lines:
            value = _line_fn(line)(value)
        out.append(repr(value))
    return out


def words(steps: list[tuple[Op, int | None, int]]) -> str:
    return ", then ".join(op.phrases[p].format(c=c) for op, c, p in steps)
