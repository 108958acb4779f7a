"""The `math` verifier: `math-verify` with the gold answer first, in a worker process with a hard timeout.

math-verify's own timeouts are signal based and break in threads, so every call runs in the main thread
of a dedicated worker process; a call that overruns `timeout_s` kills the worker (it is restarted on the
next call) and the answer fails with `detail="timeout"`. One known false positive is blocked: math-verify
judges the set `{1,2}` equal to the open interval `(1,2)`; answers whose structure differs (set vs
interval vs tuple) never pay. Params: `MathParams` (`answer`, gold, LaTeX or plain text).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from trialground.errors import VerifierError
from trialground.tasks.model import Task
from trialground.tasks.verifiers import MathParams
from trialground.verify.kinds.answers import last_boxed
from trialground.verify.verdict import Verdict

if TYPE_CHECKING:
    from trialground.verify.kinds.context import GradingContext


def _kind(obj: Any) -> str:
    name = type(obj).__name__
    if name == "FiniteSet":
        return "set"
    if name in ("Interval", "Union") or name.startswith("Interval"):
        return "interval"
    if name == "Tuple" or isinstance(obj, tuple):
        return "tuple"
    return "other"


def check(gold: str, answer: str) -> tuple[bool, str]:
    """Runs in the worker: (equal, detail). Gold first, as math-verify's asymmetry requires."""
    from math_verify import parse, verify

    gold_text = gold if "$" in gold or "\\boxed" in gold else f"${gold}$"
    g, a = parse(gold_text), parse(answer)
    if not g:
        return False, "gold answer does not parse"
    if not a:
        return False, "answer does not parse"
    if not verify(g, a):
        return False, f"{a[0]} != {g[0]}"
    kinds = {_kind(g[0]), _kind(a[0])}
    if len(kinds) > 1 and kinds <= {"set", "interval", "tuple"}:
        return False, f"structure differs: {_kind(a[0])} {a[0]} vs {_kind(g[0])} {g[0]}"
    return True, f"{a[0]} == {g[0]}"


def _serve(conn: Connection) -> None:
    while True:
        try:
            gold, answer = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", *check(gold, answer)))
        except Exception as e:  # a crash inside math-verify is a failed parse, reported as such
            conn.send(("error", False, f"{type(e).__name__}: {e}"))


class MathWorker:
    """One long-lived worker process; calls are serialised. Killed and restarted on a timeout."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: Any = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        ctx = mp.get_context("forkserver")
        parent, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child,), daemon=True, name="tg-math-verify")
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def call(self, gold: str, answer: str) -> tuple[bool, str]:
        with self._lock:
            if self._proc is None or not self._proc.is_alive():
                self._kill()
                self._start()
            assert self._conn is not None
            self._conn.send((gold, answer))
            if not self._conn.poll(self.timeout_s):
                self._kill()
                return False, "timeout"
            try:
                status, ok, detail = self._conn.recv()
            except EOFError as e:
                self._kill()
                raise VerifierError("math-verify worker died", kind="worker_died") from e
            return bool(ok) and status == "ok", detail

    def close(self) -> None:
        with self._lock:
            self._kill()


def resource(context: GradingContext) -> MathWorker:
    """The `math` kind's resource: one math-verify worker process per grader (started on first use)."""
    return MathWorker(context.grading.math_timeout_s)


def answer_text(completion: str) -> str:
    """What math-verify parses: the last \\boxed{} as LaTeX if any, else the completion."""
    boxed = last_boxed(completion)
    return f"${boxed}$" if boxed is not None else completion


async def verify_math(
    task: Task, submission: str, worker: MathWorker, params: MathParams | None = None
) -> Verdict:
    gold = (params or task.verifier.params_as(MathParams)).answer
    ok, detail = await asyncio.to_thread(worker.call, str(gold), answer_text(submission))
    return Verdict(passed=ok, score=float(ok), detail=detail)
