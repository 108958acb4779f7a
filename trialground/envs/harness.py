"""The harness environment: the user's own agent program is the episode.

``reset(task)`` prepares the task's sandbox exactly as the tool environment does (workspace files and
visible checks; a pooled sandbox handed over at its snapshot). ``play(path, key)`` runs
`EnvConfig.harness_command` in it, once, for the whole episode: through the launcher
(`harness_launcher.py`), with the workspace as its working directory, the task's prompt on standard input
and in ``TRIALGROUND_PROMPT``, ``OPENAI_BASE_URL`` (the sandbox's own loopback, relayed to the episode's own
unix socket) and ``OPENAI_API_KEY`` (this episode's key), ``TRIALGROUND_ANSWER_FILE``, and the program
from `harness_dir` (shown read-only at ``/run/trialground-harness``, on ``PATH`` and ``PYTHONPATH``)
and `harness_venv` (shown read-only at its own path, its ``bin/`` first on ``PATH``). The sandbox has no
network but its loopback, so the gateway is the only thing the program reaches.

When the program exits, or the episode's wall time (`max_episode_s`) ends it, the task's grader grades
the workspace (the tool environment's grading: `ToolEnv._grade`): the submission is the text the program
wrote to ``TRIALGROUND_ANSWER_FILE`` when it wrote one (an answer, as `submit(answer)` gives it), else the
task's solution file. The final observation is `done` with the `EpisodeEnd` (the grading, scored by the
rubric after the episode like any other); `finish_reason` is ``exited``, ``exited_nonzero`` or
``time_limit`` or ``budget_exhausted`` (the gateway session's budget ended it:
`trialground.gateway.budget`). ``step`` is not used: the program drives the episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shlex
import sys
import typing
from pathlib import Path

from trialground.envs.base import EpisodeStart, Observation
from trialground.envs.harness_launcher import LAUNCHER
from trialground.envs.tool_env import ToolEnv
from trialground.errors import EnvError, SandboxError, TrialgroundError
from trialground.sandbox.backends.bwrap import PRELOAD_KEEP, python_prefix, split_python
from trialground.sandbox.base import WORKSPACE, ExecStatus, Limits, SandboxConfig, View
from trialground.tasks.model import Task

GATEWAY_MOUNT = "/run/trialground-gateway"  # the gateway sockets' directory, as harness sandboxes see it
HARNESS_MOUNT = "/run/trialground-harness"  # where harness sandboxes see `harness_dir`
VENV_MOUNT = "/run/trialground-venv"  # where they see `harness_venv` when its own path cannot be shown
ANSWER_FILE = ".trialground_answer"  # relative to the workspace
BUDGET_EXHAUSTED = "budget_exhausted"  # finish reason of an episode its gateway budget ended
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
BYTECODE_SAMPLE = 3000  # modules of a virtualenv looked at for compiled bytecode
BYTECODE_WARN_SHARE = 0.2  # warn when more than this share of them has none
SHELL_SYNTAX = frozenset("|&;<>()$`*?[]{}~#!\\\n")  # a command holding any of these goes through bash
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)

log = logging.getLogger(__name__)


def host_view_backends() -> list[str]:
    """The sandbox backends that can show host directories (`SandboxCaps.host_views`)."""
    from trialground.sandbox.backends import BACKENDS

    return [b.name for b in BACKENDS.entries() if b.capabilities.host_views]


def check_config(env: object) -> None:
    """The harness kind's own check of `env` (run when the config loads)."""
    from trialground.envs.config import EnvConfig

    assert isinstance(env, EnvConfig)
    if not env.harness_command:
        raise ValueError("env.kind=harness needs env.harness_command (the command that runs your agent)")


def harness_sandbox_config(base: SandboxConfig, env: object, socket_dir: str) -> SandboxConfig:
    """`base` with the gateway's socket directory, `harness_dir` and `harness_venv` shown read-only."""
    from trialground.envs.config import EnvConfig
    from trialground.sandbox.backends import BACKENDS

    assert isinstance(env, EnvConfig)
    if not BACKENDS.lookup(base.backend).capabilities.host_views:
        raise EnvError(
            f"env.kind=harness shows the gateway socket and your program in the sandbox: sandbox.backend="
            f"{base.backend} cannot show host directories; choose one that can "
            f"({', '.join(host_view_backends())})",
            kind="config",
        )
    shown = [View(source=socket_dir, target=GATEWAY_MOUNT, kept=False)]
    if env.harness_dir is not None:
        shown.append(View(source=os.path.realpath(env.harness_dir), target=HARNESS_MOUNT))
    if env.harness_venv is not None:
        real = os.path.realpath(env.harness_venv)
        shown.append(View(source=real, target=venv_target(real)))
        missing, seen = bytecode_gap(real)
        if seen and missing > BYTECODE_WARN_SHARE * seen:
            log.warning(
                "env.harness_venv %s: %d of %d modules looked at have no compiled bytecode for their Python. "
                "The sandbox shows the virtualenv read-only, so every episode compiles them again (an "
                "`import openai` costs ~2.5x its compiled time). Compile it once: %s/bin/python -m "
                "compileall -q %s/lib",
                real,
                missing,
                seen,
                real,
                real,
            )
    update: dict[str, object] = {"views": (*base.views, *shown), "network": False}
    if env.harness_preload:
        plan = python_plan(env, base)
        if plan is None:
            raise EnvError(
                f"env.harness_preload needs env.harness_venv and env.harness_command of the form "
                f"`[VAR=value ...] python [options] (-m MODULE | FILE | -c CODE) ...` with nothing else for "
                f"bash to do, whose python is harness_venv's link to the sandbox's interpreter "
                f"({python_prefix(base)}/bin/python3); got {env.harness_command!r}",
                kind="config",
            )
        update["preload"] = tuple(env.harness_preload)
        site = typing.cast("list[str]", plan["site"])
        update["preload_path"] = (*([HARNESS_MOUNT] if env.harness_dir else []), *site)
    return base.model_copy(update=update)


def python_plan(env: object, sandbox: SandboxConfig) -> dict[str, object] | None:
    """How the launcher runs `harness_command` in its own interpreter (forked from the sandbox's
    supervisor, with `harness_preload` imported) rather than through bash: for a command
    `[VAR=value ...] python ARGS` with nothing else for bash to do, where `python`, looked up on the
    program's PATH, is harness_venv's link to the sandbox's interpreter. None otherwise (also without
    harness_venv, or a venv that includes the system's site-packages)."""
    from trialground.envs.config import EnvConfig

    assert isinstance(env, EnvConfig)
    command = env.harness_command or ""
    if env.harness_venv is None or sandbox.rootfs or SHELL_SYNTAX & set(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    assigned: dict[str, str] = {}
    while words and ASSIGNMENT.fullmatch(words[0]):
        key, _, value = words.pop(0).partition("=")
        assigned[key] = value
    split = split_python(words) if words and "/" not in words[0] else None
    if split is None:
        return None
    real = os.path.realpath(env.harness_venv)
    if re.search(r"^include-system-site-packages\s*=\s*true", _read(f"{real}/pyvenv.cfg"), re.I | re.M):
        return None
    search = [f"{real}/bin", *([os.path.realpath(env.harness_dir)] if env.harness_dir else [])]
    search += [f"{python_prefix(sandbox)}/bin", *DEFAULT_PATH.split(":")]
    found = next((f"{d}/{words[0]}" for d in search if os.access(f"{d}/{words[0]}", os.X_OK)), None)
    interpreter = os.path.realpath(f"{python_prefix(sandbox)}/bin/python3")
    if found is None or not found.startswith(f"{real}/bin/") or os.path.realpath(found) != interpreter:
        return None
    target = venv_target(real)
    site = [f"{target}/{p.relative_to(real)}" for p in sorted(Path(real).glob("lib/python3.*/site-packages"))]
    flags, mode, program, argv = split
    return {
        "flags": sorted(flags), "mode": mode, "target": program, "argv": argv, "env": assigned,
        "prefix": target, "executable": f"{target}/bin/{words[0]}", "site": site,
    }  # fmt: skip


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def bytecode_gap(venv: str, sample: int = BYTECODE_SAMPLE) -> tuple[int, int]:
    """(modules without a matching `__pycache__` file, modules looked at) over the first `sample` `.py`
    files of the virtualenv's `lib/pythonX.Y` trees; the cache tag comes from each tree's name, so a
    virtualenv of another Python version than trialground's is judged by its own. A venv installed
    without byte-compiling (`uv pip install` does not compile by default) has none."""
    missing = seen = 0
    for lib in sorted(Path(venv, "lib").glob("python3.*")):
        tag = "cpython-" + lib.name.removeprefix("python").replace(".", "")
        for directory, subdirs, files in os.walk(lib):
            subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
            modules = sorted(f for f in files if f.endswith(".py"))
            if not modules:
                continue
            try:
                cached = set(os.listdir(os.path.join(directory, "__pycache__")))
            except OSError:
                cached = set()
            for name in modules:
                seen += 1
                missing += f"{name[:-3]}.{tag}.pyc" not in cached
                if seen >= sample:
                    return missing, seen
    return missing, seen


def venv_target(real: str) -> str:
    """Where a harness sandbox sees the virtualenv at `real`: at its own path (its console scripts name
    it), else, when that path is one the sandbox mounts itself (under /tmp, say), at `VENV_MOUNT`, where
    its `python` still finds its packages (a virtualenv is found from its interpreter's location)."""
    try:
        View(source=real, target=real)
    except ValueError:
        return VENV_MOUNT
    return real


class HarnessEnv(ToolEnv):
    """See the module docstring. One `play` per `reset`."""

    async def reset(self, task: Task) -> Observation:
        obs = await super().reset(task)
        digest = obs.start.workspace_digest if obs.start is not None else None
        return Observation(text=task.prompt, start=EpisodeStart(workspace_digest=digest))

    async def step(self, action: str) -> Observation:
        raise EnvError(
            "a harness episode is played by its program (HarnessEnv.play), not step()", kind="no_step"
        )

    def _program_env(self, key: str, prompt: str) -> dict[str, str]:
        cfg = self.config
        path = f"{self._prefix()}/bin:{DEFAULT_PATH}"
        if cfg.harness_dir is not None:
            path = f"{HARNESS_MOUNT}:{path}"
        if cfg.harness_venv is not None:
            path = f"{venv_target(os.path.realpath(cfg.harness_venv))}/bin:{path}"
        env = {
            "PATH": path,
            "OPENAI_API_KEY": key,
            "TRIALGROUND_PROMPT": prompt,
            "TRIALGROUND_ANSWER_FILE": f"{WORKSPACE}/{ANSWER_FILE}",
            "PYTHONUNBUFFERED": "1",
        }
        if cfg.harness_dir is not None:
            env["PYTHONPATH"] = HARNESS_MOUNT
        if cfg.harness_venv is not None:
            env["VIRTUAL_ENV"] = venv_target(os.path.realpath(cfg.harness_venv))
        if self.sandbox_config.preload:
            env[PRELOAD_KEEP] = "keep"  # this command, unlike the grader's, runs with the preloaded modules
        return env

    async def play(
        self, path: str, key: str, stop: asyncio.Event | None = None, *, socket: str
    ) -> Observation:
        """Run the program against the gateway session at base path `path` with `key`, reached through its
        own unix socket `socket` (a name in the gateway's socket directory), then grade. When `stop` is set
        first (the session's budget is spent) the program is stopped and the workspace graded as at any
        limit (`finish_reason` ``budget_exhausted``)."""
        if self.task is None or self.sandbox is None:
            return self._final(
                "not_started", error=EnvError("play() before reset()", kind="not_reset").info()
            )
        if self.state.done:
            return self._over()
        assert self.config.harness_command is not None
        task = self.task
        base = task.limits or self.sandbox_config.limits
        wall = max(1.0, self.config.max_episode_s - self.elapsed_s())
        limits = Limits(
            wall_s=min(wall, 3600.0),
            cpu_s=min(wall, 3600.0),
            memory_mb=max(base.memory_mb, self.config.harness_memory_mb),
            pids=max(base.pids, self.config.harness_pids),
            file_size_mb=base.file_size_mb,
            disk_mb=base.disk_mb,
            output_bytes=base.output_bytes,
            cpus=base.cpus,
        )
        launch: dict[str, object] = {
            "socket": f"{GATEWAY_MOUNT}/{socket}",
            "path": path,
            "command": self.config.harness_command,
            "cwd": WORKSPACE,
        }
        if self.sandbox_config.preload:
            launch["python"] = python_plan(self.config, self.sandbox_config)
        argv = [f"{self._prefix()}/bin/python3", "-I", "-S", "-c", LAUNCHER, json.dumps(launch)]
        self.state.turn = 1
        running = asyncio.ensure_future(
            self.sandbox.exec(
                argv, stdin=task.prompt, env=self._program_env(key, task.prompt), cwd=WORKSPACE, limits=limits
            )
        )
        if stop is not None:
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait({running, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not running.done():  # the budget ended it: stop the program (the sandbox kills it), grade
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running
                self.state.history.append(("env", "the episode's model budget is spent"))
                return await self._limit(BUDGET_EXHAUSTED, "the episode's model budget is spent")
        try:
            result = await running
        except TrialgroundError as e:
            return self._fail(e.info())
        except Exception as e:  # a sandbox backend bug ends this episode only
            return self._fail(SandboxError(f"harness: {type(e).__name__}: {e}", kind="crashed").info())
        if result.status is ExecStatus.SANDBOX_ERROR:
            return self._fail(SandboxError(f"harness: {result.stderr[-500:]}", kind="exec_failed").info())
        self.state.counters["harness_exit"] = result.exit_code if result.exit_code is not None else -1
        tail = (result.stdout[-1000:] + result.stderr[-1000:]).strip()
        self.state.history.append(("env", tail))
        if result.status is ExecStatus.TIMEOUT:
            return await self._limit("time_limit", tail)
        answer = await self._answer()
        reason = "exited" if result.exit_code == 0 else "exited_nonzero"
        return await self._grade(reason, answer, tail)

    def _prefix(self) -> str:
        return self.sandbox_config.python_prefix or sys.base_prefix

    async def _answer(self) -> str | None:
        assert self.sandbox is not None
        try:
            data = await self.sandbox.read(ANSWER_FILE)
        except (OSError, ValueError, SandboxError):
            return None
        text = data.decode("utf-8", errors="replace").strip()
        return text or None
