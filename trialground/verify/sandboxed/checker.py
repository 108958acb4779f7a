"""The checker half of the `code_tests` runner (see `runner.py`): runs the tests, never the submission.

A process forked from the runner's supervisor after the submission worker, so the worker holds neither
this process's result pipe nor its key. It never imports the submission: the solution module the tests
import is a proxy whose functions are remote calls into the worker (`worker.py`). Arguments go
out and return values come back as plain data (`wire.py`), decoded into fresh builtin objects here, so
every assertion, comparison and helper of the tests runs in this interpreter with its own, unpatched
modules: a custom `__eq__`, a builtin subclass, a patched `math` or `builtins`, or a forged result in the
worker cannot reach a verdict. Standard library only; never imported by the host.

Remote calls:
- an exception raised by the submission comes back as its nearest builtin class (by the class's MRO) and
  its message, and is raised here as that builtin class (`SystemExit` fails the test and is flagged
  `early_exit`); so `try/except ValueError` and `pytest.raises`-style checks keep working;
- arguments are passed by value: they must be plain data (a callback, a class instance or a stub of the
  solution as an argument is a `TypeError` in the test), and the submission's mutations of them are not
  seen by the test;
- a return value that is not plain data (an instance of a solution class, a generator, a builtin
  subclass) fails the test; with `strict_types` it is flagged `always_equal`. Classes and methods of the
  solution are therefore not testable in isolated grading: calling a class is a call like any other and
  its instance cannot cross;
- a reply that is malformed or too large, or the worker ending, fails the test (malformed replies are
  flagged `runner_tampering`) and the supervisor starts a fresh pair for the remaining tests.
"""

import os
import sys
import time


class _Lost(Exception):
    """The worker's channel broke (it ended, or sent something that is not a reply)."""


class _NotPlain(BaseException):
    """The submission returned something that is not plain data (BaseException: tests cannot catch it)."""


class _SubmissionExit(BaseException):
    """The submission raised SystemExit (BaseException, as SystemExit: tests cannot swallow it)."""


class SubmissionError(Exception):
    """A non-builtin exception of the submission (its builtin base is in the message)."""


def checker(hdr, wire, key, report_w, call_w, reply_r, start, names, hidden_failed):
    """Run tests `start..` (indices into `names`), reporting each to the supervisor over `report_w`."""
    import builtins
    import marshal
    import types
    from _blake2 import blake2b

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the tests' output goes nowhere; stdin still holds the host key
        os.dup2(devnull, fd)
    os.close(devnull)
    sys.dont_write_bytecode = True
    encode, decode, WireError = wire["encode"], wire["decode"], wire["WireError"]
    send_frame, recv_frame = wire["send_frame"], wire["recv_frame"]
    token = hdr["token"]
    flags: list = []
    seq = [0]
    cur = [start]

    def send(obj):
        body = marshal.dumps(obj).hex()
        mac = blake2b(body.encode(), key=key, digest_size=32).hexdigest()
        os.write(report_w, (mac + " " + body + "\n").encode())

    def flag(name, evidence, severity="hack"):
        flags.append((name, evidence[:300], severity))

    def take_flags(raw):
        """The worker's flags: evidence it chose to send, kept only when well-formed (it can only lose)."""
        if type(raw) is not list:
            raise _Lost("a reply with malformed flags")
        for f in raw[:100]:
            if type(f) is tuple and len(f) == 2 and type(f[0]) is str and type(f[1]) is str:
                flags.append((f[0][:64], f[1][:300]))

    def receive(expect):
        try:
            msg = decode(recv_frame(reply_r, os.read))
        except EOFError:
            raise _Lost("the submission's process ended") from None
        except (WireError, OSError) as e:
            flag("runner_tampering", f"a malformed reply on the call channel: {e}")
            raise _Lost(f"a malformed reply from the submission's process: {e}") from None
        if type(msg) is not tuple or not msg or msg[0] not in expect:
            flag("runner_tampering", "a reply out of protocol on the call channel")
            raise _Lost("a reply out of protocol from the submission's process")
        return msg

    def rpc(msg, payload=None):
        try:
            send_frame(call_w, payload if payload is not None else encode(msg), os.write)
        except OSError:
            raise _Lost("the submission's process ended") from None
        reply = receive(("ret", "exc", "nonplain", "flags"))
        if len(reply) < 3 or reply[1] != msg[1]:
            flag("runner_tampering", "a reply out of sequence on the call channel")
            raise _Lost("a reply out of sequence from the submission's process")
        take_flags(reply[-1])
        return reply

    def exception(name, message):
        if type(name) is not str or type(message) is not str:
            raise _Lost("a malformed exception reply")
        if name == "SystemExit":
            flag("early_exit", f"SystemExit raised by the submission during {names[cur[0]]}")
            return _SubmissionExit(message)
        cls = vars(builtins).get(name)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            return SubmissionError(f"{name}: {message}")
        for base in cls.__mro__:  # some classes need more constructor arguments: use a simpler base
            try:
                return base(message)
            except TypeError:
                continue
        return SubmissionError(f"{name}: {message}")

    def stub(name):
        def call(*args, **kwargs):
            seq[0] += 1
            msg = ("call", seq[0], name, args, kwargs)
            try:
                payload = encode(msg)
            except WireError as e:
                raise TypeError(f"isolated grading passes plain data only: {name}(): {e}") from None
            reply = rpc(msg, payload)
            kind = reply[0]
            if kind == "ret" and len(reply) == 4:
                return reply[2]
            if kind == "exc" and len(reply) == 5:
                raise exception(reply[2], reply[3])
            if kind == "nonplain" and len(reply) == 4:
                raise _NotPlain(f"{name} returned a {str(reply[2])[:200]}, not plain data")
            flag("runner_tampering", "a malformed reply on the call channel")
            raise _Lost("a malformed reply from the submission's process")

        call.__name__ = call.__qualname__ = name
        return call

    def after_test():
        seq[0] += 1
        rpc(("after", seq[0]))

    def sealed_check(j):
        def __tg_check__(value, k):
            """An `assert value == <literal>` whose literal the host kept out of the sandbox until the
            end: the value goes to the supervisor, which compares it after every process is gone."""
            try:
                size = len(marshal.dumps(value))
            except ValueError:
                raise AssertionError("the value cannot be checked") from None
            if size > 4_000_000:
                raise AssertionError("the value is too large to check")
            send({"t": "check", "i": cur[0], "j": j, "k": k, "v": value})

        return __tg_check__

    # The manifest: what the submission's module holds (the worker imported it meanwhile).
    sol_name = hdr["solution_module"]
    import_error, lost = None, None
    proxy = types.ModuleType(sol_name)
    try:
        manifest = receive(("manifest",))
        if len(manifest) != 5 or type(manifest[1]) is not list or type(manifest[2]) is not dict:
            flag("runner_tampering", "a malformed manifest on the call channel")
            raise _Lost("a malformed manifest from the submission's process")
        take_flags(manifest[4])
        import_error = manifest[3]
        if import_error is not None:
            import_error = str(import_error)[:500]
        for k, v in manifest[2].items():
            if type(k) is str and not k.startswith("__"):
                setattr(proxy, k, v)
        for k in manifest[1]:
            if type(k) is str and not k.startswith("__"):
                setattr(proxy, k, stub(k))
    except _Lost as e:
        lost = f"while importing the submission: {e}"
    sys.modules[sol_name] = proxy  # `import solution` in a test finds the proxy, never the file

    loaded = {}

    def load(spec, j):
        """name -> test function (or an error string) for one check file, compiled by the host."""
        mod = types.ModuleType(spec["module"])
        mod.__file__ = "<tg-" + token + ":" + spec["path"] + ">"
        mod.__dict__["__tg_check__"] = sealed_check(j)
        try:
            exec(spec["code"], mod.__dict__)
            return {spec["prefix"] + n: getattr(mod, n, None) for n in spec["names"]}
        except _Lost:
            raise
        except BaseException as e:
            err = f"loading {spec['path']}: {type(e).__name__}: {e}"
            return {spec["prefix"] + n: err for n in spec["names"]}

    reported = 0
    owner = [j for j, spec in enumerate(hdr["tests"]) for _ in spec["names"]]
    n_hidden = hdr["n_hidden"]
    for i in range(start, len(names)):
        name = names[i]
        before = len(flags)
        cur[0] = i
        send({"t": "start", "i": i})
        if i >= n_hidden and not hidden_failed:
            # visible checks only matter when hidden ones failed (to flag overfitting to the visible ones)
            send({"t": "result", "i": i, "outcome": "skipped", "detail": "hidden tests passed", "s": 0.0,
                  "flags": flags[reported:]})  # fmt: skip
            reported = len(flags)
            continue
        t0 = time.perf_counter()
        outcome, detail = "passed", ""
        try:
            if lost is not None:
                raise _Lost(lost)
            if import_error is None and owner[i] not in loaded:
                loaded[owner[i]] = load(hdr["tests"][owner[i]], owner[i])
            fn = loaded[owner[i]].get(name) if import_error is None else None
            if import_error is not None:
                outcome, detail = "error", import_error
            elif isinstance(fn, str):
                outcome, detail = "error", fn
            elif fn is None:
                outcome, detail = "missing", "test function not found after import"
            else:
                try:
                    fn()
                except AssertionError as e:
                    outcome, detail = "failed", f"AssertionError: {e}"[:500]
                except _NotPlain as e:
                    outcome, detail = "failed", f"{e}"[:500]
                except _SubmissionExit as e:
                    outcome, detail = "failed", f"SystemExit({e}) raised by the submission"[:500]
                except _Lost:
                    raise
                except BaseException as e:
                    outcome, detail = "error", f"{type(e).__name__}: {e}"[:500]
            after_test()
        except _Lost as e:
            if outcome == "passed":
                outcome, detail = "failed", f"{e}"[:500]
            send({"t": "result", "i": i, "outcome": outcome, "detail": detail,
                  "s": time.perf_counter() - t0, "flags": flags[reported:]})  # fmt: skip
            send({"t": "lost", "why": str(e)[:300]})
            os._exit(0)
        if len(flags) > before and outcome == "passed":
            outcome, detail = "failed", "flagged: " + "; ".join(f[1] for f in flags[before:])
        if i < n_hidden and outcome != "passed":
            hidden_failed = True
        send({"t": "result", "i": i, "outcome": outcome, "detail": detail, "s": time.perf_counter() - t0,
              "flags": flags[reported:]})  # fmt: skip
        reported = len(flags)
    send({"t": "done"})
    os._exit(0)
