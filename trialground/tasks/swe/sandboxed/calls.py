"""Recorded calls of repository grading: what the tests ask of the library, asked again without the tests.

One program, two modes (`python3 -I -S .tg/calls.py record|replay`, a JSON header on stdin):

- `record` runs in a sandbox of the *pristine* repository (its library, its tests, the bundled pytest):
  trusted code only. As each library module is imported, its functions and its classes' methods are
  wrapped; a call made directly from a test file or a conftest is one *step*: what was called (a module
  attribute, a class constructed, or a method of an object an earlier step returned), its arguments as
  plain data, and its outcome as plain data (the value; the type of a value that is not plain data; the
  type of the exception raised; lists, dicts and sets passed in, as they are after the call). A step is
  attributed to the running test (setup, call and teardown) or, outside any test, to its test file's
  prelude. Comparisons (`__eq__`, `__contains__`, ...) are not steps: their argument is what a test
  expects, and it must never reach the library's sandbox.
- `replay` runs in a sandbox that holds the *submission's* library and nothing of the tests. The header
  gives, per test, its steps without their outcomes. Each test's steps run in a forked child of a process
  that imported the library; the outcomes are printed as one line `TGCALLS <json>`. Nothing here decides
  anything: the host compares these outcomes with the recorded ones, which never enter this sandbox.

Plain data: None, bool, int, str and exact lists as JSON; tuples, floats, bytes, dicts, sets, ranges and
complex numbers tagged (`{"$tuple": [...]}`); an object an earlier step returned as `{"$ref": step id}`
(arguments only). A subclass of any of these is not plain data: a `str` subclass that says it equals
anything is an object of its own type here. Depth and size are bounded.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from importlib.machinery import PathFinder
from typing import Any

PREFIX = "TGCALLS "
MAX_DEPTH = 24
MAX_NODES = 20_000
MAX_CHARS = 1 << 20
MAX_STEPS = 200  # per test; later calls of a test are not recorded
# Not steps: what a test compares with (its argument is the expected value), and what Python calls on its
# own (hashing, attribute protocol, object set-up)
UNRECORDED = frozenset(
    {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__", "__hash__", "__new__",
     "__init_subclass__", "__class_getitem__", "__getattribute__", "__getattr__", "__setattr__",
     "__delattr__", "__del__", "__set_name__", "__get__", "__set__", "__delete__", "__instancecheck__",
     "__subclasscheck__", "__subclasshook__", "__reduce__", "__reduce_ex__", "__getstate__",
     "__setstate__", "__copy__", "__deepcopy__", "__sizeof__", "__dir__", "__format__", "__repr__"}
)  # fmt: skip
_MUTABLE = (list, dict, set, bytearray)


class NotPlain(Exception):
    """A value that is not plain data (or is too large to be sent as such)."""


def type_name(t: type) -> str:
    return f"{getattr(t, '__module__', '?')}.{getattr(t, '__qualname__', '?')}"


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class Encoder:
    """Plain data of one value; `refs` (id -> step id) lets arguments name objects earlier steps returned."""

    def __init__(self, refs: dict[int, int] | None = None) -> None:
        self.refs = refs
        self.nodes = 0

    def enc(self, x: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if depth > MAX_DEPTH or self.nodes > MAX_NODES:
            raise NotPlain("too large")
        t = type(x)
        if x is None or t is bool:
            return x
        if t is str:
            if len(x) > MAX_CHARS:
                raise NotPlain("too large")
            return x
        if t is int:
            if x.bit_length() > 1000:
                raise NotPlain("too large")
            return x if -(2**53) < x < 2**53 else {"$int": str(x)}
        if t is float or t is complex:
            return {"$" + t.__name__: repr(x)}
        if t is bytes or t is bytearray:
            if len(x) > MAX_CHARS // 2:
                raise NotPlain("too large")
            return {"$" + t.__name__: x.hex()}
        if t is list:
            return [self.enc(v, depth + 1) for v in x]
        if t is tuple:
            return {"$tuple": [self.enc(v, depth + 1) for v in x]}
        if t is dict:
            return {"$dict": [[self.enc(k, depth + 1), self.enc(v, depth + 1)] for k, v in x.items()]}
        if t is range:
            return {"$range": [self.enc(x.start), self.enc(x.stop), self.enc(x.step)]}
        if t is set or t is frozenset:
            return {"$" + t.__name__: sorted((self.enc(v, depth + 1) for v in x), key=canonical)}
        if self.refs is not None and id(x) in self.refs:
            return {"$ref": self.refs[id(x)]}
        raise NotPlain(type_name(t))


def decode(v: Any, handles: dict[int, Any]) -> Any:
    if isinstance(v, list):
        return [decode(x, handles) for x in v]
    if not isinstance(v, dict):
        return v
    ((tag, body),) = v.items()
    if tag == "$ref":
        return handles[body]
    if tag == "$tuple":
        return tuple(decode(x, handles) for x in body)
    if tag == "$dict":
        return {decode(k, handles): decode(x, handles) for k, x in body}
    if tag == "$range":
        return range(*(decode(x, handles) for x in body))
    if tag in ("$set", "$frozenset"):
        items = (decode(x, handles) for x in body)
        return set(items) if tag == "$set" else frozenset(items)
    scalars: dict[str, Callable[[str], Any]] = {
        "$int": int, "$float": float, "$complex": complex, "$bytes": bytes.fromhex,
        "$bytearray": bytearray.fromhex,
    }  # fmt: skip
    return scalars[tag](body)


def outcome(call: Callable[[], Any], handles: dict[int, Any], step: int, args: list[Any]) -> dict[str, Any]:
    """What calling `call` came to, as plain data; an object that is not plain data becomes handle `step`."""
    try:
        result = call()
    except BaseException as e:  # an exception is an outcome, whatever it is
        return {"raise": type_name(type(e)), **mutated(args)}
    return {**returned(result, handles, step), **mutated(args)}


def returned(result: Any, handles: dict[int, Any], step: int) -> dict[str, Any]:
    try:
        return {"v": Encoder().enc(result)}
    except NotPlain:
        handles[step] = result
        return {"obj": type_name(type(result))}


def mutated(args: list[Any]) -> dict[str, Any]:
    """The lists, dicts and sets among `args` as they are now (a call may fill or change them)."""
    after: list[Any] = []
    for i, a in enumerate(args):
        if type(a) in _MUTABLE:
            try:
                after.append([i, Encoder().enc(a)])
            except NotPlain:
                after.append([i, None])
    return {"after": after} if after else {}


# --- record (trusted: the pristine repository and its tests) ---------------------------------------------


def _is_test_path(rel: str) -> bool:  # as trialground.tasks.swe.paths.is_test_path
    parts = rel.split("/")
    name = parts[-1]
    if name == "conftest.py" or name.startswith("test_") or name.endswith("_test.py"):
        return True
    return any(p.lower() in ("tests", "test", "testing") for p in parts[:-1])


class Recorder:
    """A pytest plugin and an import hook: wraps library code as it is imported, records the tests' calls."""

    def __init__(self, root: str, library: list[str]) -> None:
        self.root = os.path.join(root, "")
        self.library = [os.path.join(root, p) for p in library]
        self.current: str | None = None
        self.steps: dict[str, list[dict[str, Any]]] = {}
        self.preludes: dict[str, list[dict[str, Any]]] = {}
        self.passed: list[str] = []
        self.refs: dict[int, int] = {}
        self.keep: list[Any] = []  # keeps every handle alive, so no id is reused
        self.depth = 0
        self.count = 0

    def is_library(self, path: str) -> bool:
        return any(path == p or (p.endswith("/") and path.startswith(p)) for p in self.library)

    def test_file(self, path: str) -> str | None:
        if not path.startswith(self.root):
            return None
        rel = path[len(self.root) :]
        return rel if _is_test_path(rel) and not self.is_library(path) else None

    # the import hook
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        spec = PathFinder.find_spec(name, path)
        if spec is None or not spec.origin or not self.is_library(spec.origin) or spec.loader is None:
            return None
        loader: Any = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            self.wrap_module(module)

        loader.exec_module = exec_module
        return spec

    def wrap_module(self, module: Any) -> None:
        import types

        name = module.__name__
        for attr, value in list(vars(module).items()):
            if isinstance(value, types.FunctionType) and value.__module__ == name:
                setattr(module, attr, self.wrap(value, "path", [name, attr]))
            elif isinstance(value, type) and value.__module__ == name and value.__name__ == attr:
                self.wrap_class(value, [name, attr])

    def wrap_class(self, cls: type, path: list[str]) -> None:
        import types

        for attr, value in list(vars(cls).items()):
            if attr in UNRECORDED:
                continue
            try:
                if isinstance(value, staticmethod):
                    setattr(cls, attr, staticmethod(self.wrap(value.__func__, "path", [*path, attr])))
                elif isinstance(value, classmethod):
                    setattr(cls, attr, classmethod(self.wrap(value.__func__, "cls", [*path, attr], cls)))
                elif isinstance(value, types.FunctionType):
                    kind = "new" if attr == "__init__" else "method"
                    setattr(cls, attr, self.wrap(value, kind, [*path, attr], cls))
            except (AttributeError, TypeError):
                continue  # a class that refuses new attributes stays as it is

    def wrap(self, fn: Callable[..., Any], kind: str, path: list[str], cls: type | None = None) -> Any:
        rec = self

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if rec.depth:
                return fn(*args, **kwargs)
            where = rec.test_file(sys._getframe(1).f_code.co_filename)
            if where is None:
                return fn(*args, **kwargs)
            step = rec.begin(kind, path, cls, args, kwargs)
            passed = list(args[1:] if kind in ("new", "method", "cls") else args) + list(kwargs.values())
            rec.depth += 1
            try:
                result = fn(*args, **kwargs)
            except BaseException as e:
                rec.depth -= 1
                if step is not None:
                    rec.end(step, where, {"raise": type_name(type(e)), **mutated(passed)}, None)
                raise
            rec.depth -= 1
            if step is not None:
                if kind == "new":
                    rec.end(step, where, {"obj": type_name(type(args[0])), **mutated(passed)}, args[0])
                else:
                    handles: dict[int, Any] = {}
                    out = {**returned(result, handles, 0), **mutated(passed)}
                    rec.end(step, where, out, handles.get(0))
            return result

        return wrapper

    def begin(
        self, kind: str, path: list[str], cls: type | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The step for a call (its arguments as they are before it), or None when it cannot be one."""
        enc = Encoder(self.refs)
        try:
            if kind == "path":
                at: dict[str, Any] = {"path": path}
                rest = list(args)
            elif kind == "cls":
                if not args or args[0] is not cls:
                    return None  # called on a subclass (a test's own, perhaps)
                at, rest = {"path": path}, list(args[1:])
            elif kind == "new":
                if not args or type(args[0]) is not cls or id(args[0]) in self.refs:
                    return None
                at, rest = {"new": path[:-1]}, list(args[1:])
            else:
                if not args or id(args[0]) not in self.refs:
                    return None
                at, rest = {"ref": self.refs[id(args[0])], "attr": path[-1]}, list(args[1:])
            return {"at": at, "args": [enc.enc(a) for a in rest], "kwargs": {k: enc.enc(v) for k, v in
                    kwargs.items()}}  # fmt: skip
        except NotPlain:
            return None

    def end(self, step: dict[str, Any], where: str, out: dict[str, Any], made: Any) -> None:
        """Completes `step` with its outcome; `made` (the object it returned or constructed, when that is not
        plain data) becomes a handle later steps may name."""
        self.count += 1
        step["id"] = self.count
        step["out"] = out
        if made is not None:
            self.refs[id(made)] = self.count
            self.keep.append(made)
        book = (
            self.steps.setdefault(self.current, []) if self.current else self.preludes.setdefault(where, [])
        )
        if len(book) < MAX_STEPS:
            book.append(step)

    # pytest hooks
    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.current = nodeid

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        self.current = None

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
            self.passed.append(report.nodeid)


def record(header: dict[str, Any]) -> None:
    sys.path[:0] = [header["site"], *header["path"]]
    sys.dont_write_bytecode = True
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    rec = Recorder(header["root"], header["library"])
    sys.meta_path.insert(0, rec)  # type: ignore[arg-type]
    import pytest

    args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--color=no", *header["args"], *header["paths"]]
    code = int(pytest.main(args, plugins=[rec]))
    body = {"exit": code, "passed": rec.passed, "steps": rec.steps, "preludes": rec.preludes}
    with open(header["out"], "w", encoding="utf-8") as f:
        json.dump(body, f)


# --- replay (untrusted: the submission's library, no tests) ----------------------------------------------


def resolve(at: dict[str, Any], handles: dict[int, Any]) -> Any:
    import importlib

    if "ref" in at:
        return getattr(handles[at["ref"]], at["attr"])
    path = at.get("path") or at["new"]
    obj: Any = importlib.import_module(path[0])
    for name in path[1:]:
        obj = getattr(obj, name)
    return obj


def run_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    handles: dict[int, Any] = {}
    outs: list[dict[str, Any]] = []
    for step in steps:
        try:
            fn = resolve(step["at"], handles)
            args = [decode(a, handles) for a in step["args"]]
            kwargs = {k: decode(v, handles) for k, v in step["kwargs"].items()}
        except BaseException as e:
            outs.append({"unresolved": type_name(type(e))})
            continue
        call = functools.partial(fn, *args, **kwargs)
        outs.append(outcome(call, handles, step["id"], [*args, *kwargs.values()]))
    return outs


def replay(header: dict[str, Any]) -> None:
    import importlib

    sys.path[:0] = header["path"]
    sys.dont_write_bytecode = True
    tests: dict[str, list[dict[str, Any]]] = header["tests"]
    for name in sorted({s["at"].get("path", s["at"].get("new", [None]))[0] for v in tests.values() for s in v}
                       - {None}):  # fmt: skip
        try:
            importlib.import_module(name)
        except BaseException:  # a step that needs it records the failure
            continue
    results: dict[str, Any] = {}
    for nodeid, steps in tests.items():
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                data = json.dumps(run_steps(steps)).encode()
            except BaseException:
                data = b"null"
            while data:
                data = data[os.write(w, data) :]
            os._exit(0)
        os.close(w)
        chunks, size = [], 0
        while size <= 8 * MAX_CHARS:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        os.close(r)
        os.waitpid(pid, 0)
        try:
            results[nodeid] = json.loads(b"".join(chunks)) if size <= 8 * MAX_CHARS else None
        except ValueError:
            results[nodeid] = None
    sys.stdout.write("\n" + PREFIX + json.dumps(results) + "\n")
    sys.stdout.flush()


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    header = json.loads(sys.stdin.buffer.read())
    {"record": record, "replay": replay}[mode](header)


if __name__ == "__main__":
    main()
