"""The hf policy in a child process: generation off the trainer's interpreter, its GIL and its core.

On CPU the trainer, the sampler and the rollouts' event loop are all Python-bound; in one process they
take turns on one GIL however many cores there are. `HFProcessPolicy` runs an `HFPolicy` in a child
process (a fresh interpreter) and keeps only the tokenizer here, the way a trainer talks to an inference
server: prompts go over a socket, generations come back, and the trainer pushes its weights after every
step.

Requests travel over one socket and the child serves them in order, so a push reaches every generation
requested after it, and `load_weights` returns without waiting for the generation that is running (the
child applies the push between generations). Answers come back by request id on a reader thread. If the
child dies, every waiting and later call raises `PolicyError` with its exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import pickle
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from multiprocessing.connection import Connection
from typing import Any

import torch

from trialground.errors import PolicyError
from trialground.policy.backends.hf.hf import encode_chat, load_tokenizer
from trialground.policy.base import Generation, Policy, SamplingParams
from trialground.policy.config import PolicyConfig

_START_TIMEOUT_S = 300.0
# HFPolicy methods the parent may call in the child (besides generate and load_weights)
_FORWARDED = ("seed_sampling", "sampling_rng_state", "set_sampling_rng_state", "score")


class HFProcessPolicy(Policy):
    """An `HFPolicy` in a child process. Same tokens as in-process for the same seed (test)."""

    def __init__(self, config: PolicyConfig) -> None:
        self.config = config
        self._tokenizer: Any = load_tokenizer(config)  # a model that is not there fails here, at once
        ours, theirs = socket.socketpair()
        inner = config.model_copy(update={"separate_process": False}).model_dump_json()
        # A fresh interpreter that imports only this module (a fork would copy torch's thread pools
        # mid-use; multiprocessing's spawn would re-import the caller's main module).
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(theirs.fileno()), inner],
            stdin=subprocess.DEVNULL,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self._conn = Connection(ours.detach())
        # The child loads torch and the model while this process goes on (the run loads its tasks
        # meanwhile); the reader thread takes its hello, and requests queue up until then.
        self._names: frozenset[str] = frozenset()
        self._started = threading.Event()
        self.version = 0
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._waiting: dict[int, Future[Any]] = {}
        self._failure: str | None = None  # why the child can no longer serve
        # A writer thread sends: a weight push must not block its caller while the child is busy
        # generating and the pipe is full.
        self._outbox: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._write, name="trialground-policy-writer", daemon=True),
            threading.Thread(target=self._read, name="trialground-policy-reader", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return encode_chat(self._tokenizer, messages)

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        result: list[Generation] = await asyncio.wrap_future(
            self._request("generate", [list(p) for p in prompts], params)
        )
        return result

    def generate_sync(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        if not prompts:
            return []
        result: list[Generation] = self._request("generate", [list(p) for p in prompts], params).result()
        return result

    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Send the weights (copied now, so the trainer may change its own at once); never waits for
        the child. A push the child rejects fails every later call."""
        self._started.wait()  # the parameter names come with the child's hello
        if self._failure is not None:
            raise PolicyError(self._failure)
        unknown = [k for k in state_dict if k not in self._names]
        if unknown:
            raise PolicyError(f"load_weights: unknown parameter names {unknown[:5]}")
        weights = {k: torch.as_tensor(v).detach().cpu().clone() for k, v in state_dict.items()}
        self._request("load", weights, version)
        self.version = version

    def seed_sampling(self, seed: int) -> None:
        self._call("seed_sampling", seed)

    def sampling_rng_state(self) -> torch.Tensor:
        state: torch.Tensor = self._call("sampling_rng_state")
        return state

    def set_sampling_rng_state(self, state: torch.Tensor) -> None:
        self._call("set_sampling_rng_state", state)

    def score(
        self, prompt: Sequence[int], completion: Sequence[int], temperature: float = 1.0
    ) -> list[float]:
        scores: list[float] = self._call("score", list(prompt), list(completion), temperature)
        return scores

    def close(self) -> None:
        """Stop the child (it also exits on its own when this process dies: its socket closes)."""
        self._outbox.put(("stop", -1, None))
        self._outbox.put(None)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(5)
        for thread in self._threads:
            thread.join(5)
        self._conn.close()

    def _call(self, method: str, *args: Any) -> Any:
        return self._request("call", method, args).result()

    def _request(self, kind: str, *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:  # ids and queue order agree: the child serves requests as they were made
            if self._failure is not None:
                raise PolicyError(self._failure)
            rid = next(self._ids)
            self._waiting[rid] = future
            self._outbox.put((kind, rid, *args))
        return future

    def _write(self) -> None:
        while (message := self._outbox.get()) is not None:
            try:
                _send(self._conn, message)
            except (OSError, ValueError) as exc:
                self._fail(f"the generation process is gone: {exc}")
                return

    def _read(self) -> None:
        try:
            if not self._conn.poll(_START_TIMEOUT_S):
                self._proc.kill()
                self._fail(f"the generation process did not start within {_START_TIMEOUT_S:.0f}s")
                return
            kind, _, payload = _recv(self._conn)
        except (EOFError, OSError):
            kind, payload = "error", "it exited while starting"
        if kind != "ready":
            self._fail(f"the generation process could not load model {self.config.model!r}: {payload}")
            return
        self._names = frozenset(payload)
        self._started.set()
        while True:
            try:
                kind, rid, payload = _recv(self._conn)
            except (EOFError, OSError):
                self._fail(f"the generation process exited (exit code {self._exit_code()})")
                return
            with self._lock:
                future = self._waiting.pop(rid, None)
            if kind == "error" and payload.startswith("load:"):
                self._fail(f"a weight push failed in the generation process: {payload[5:]}")
            if future is None:
                continue
            with contextlib.suppress(InvalidStateError):  # the caller cancelled meanwhile
                if kind == "ok":
                    future.set_result(payload)
                else:
                    future.set_exception(PolicyError(payload))

    def _exit_code(self) -> int | None:
        try:
            return self._proc.wait(5)
        except subprocess.TimeoutExpired:
            return None

    def _fail(self, why: str) -> None:
        with self._lock:
            self._failure = self._failure or why
            waiting, self._waiting = self._waiting, {}
        self._started.set()  # wakes a caller waiting for the hello; it finds the failure
        for future in waiting.values():
            with contextlib.suppress(InvalidStateError):  # done or cancelled meanwhile
                future.set_exception(PolicyError(why))


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    # Plain pickle: tensors travel by value. (Connection.send would use torch's shared-memory reductions,
    # which need a multiprocessing-spawned peer.)
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _recv(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


def _serve(conn: Connection, config_json: str) -> None:
    """The child: load the model, then answer requests in order until "stop" or the pipe closes."""
    from trialground.policy.backends.hf.hf import HFPolicy

    try:
        policy = HFPolicy(PolicyConfig.model_validate_json(config_json))
    except Exception as exc:  # reported to the parent, which raises it
        _send(conn, ("error", -1, f"{type(exc).__name__}: {exc}"))
        return
    _send(conn, ("ready", -1, list(policy.model.state_dict())))
    while True:
        try:
            kind, rid, *args = _recv(conn)
        except (EOFError, OSError):
            return
        if kind == "stop":
            return
        try:
            if kind == "generate":
                result: Any = policy.generate_sync(args[0], args[1])
            elif kind == "load":
                policy.load_weights(args[0], args[1])
                result = None
            elif kind == "call" and args[0] in _FORWARDED:
                result = getattr(policy, args[0])(*args[1])
            else:
                raise PolicyError(f"unknown request {kind!r}")
        except Exception as exc:  # the parent raises it as a PolicyError where it was asked
            prefix = "load:" if kind == "load" else ""
            why = str(exc) if isinstance(exc, PolicyError) else f"{type(exc).__name__}: {exc}"
            _send(conn, ("error", rid, prefix + why))
            continue
        _send(conn, ("ok", rid, result))


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; the child ends with its socket
    _serve(Connection(int(sys.argv[1])), sys.argv[2])
