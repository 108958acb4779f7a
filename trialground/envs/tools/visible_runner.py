"""Shipped into the sandbox as text (`run_tests.VISIBLE_RUNNER`), run as `python -B -c SOURCE FILE...`:
runs the visible `test_*` functions of pytest-style files with the standard library only (the sandbox's
Python need not have pytest). Prints one line per test and a summary; exits 1 unless all passed."""

import importlib.util
import inspect
import os
import sys
import traceback


def main(paths: list[str]) -> int:
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.getcwd())
    passed = failed = 0
    for path in paths:
        try:
            spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
            assert spec is not None and spec.loader is not None, path
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        except BaseException:
            failed += 1
            print(f"ERROR {path} (collecting)")
            traceback.print_exc(limit=-2, file=sys.stdout)
            continue
        for name, fn in list(vars(mod).items()):
            if not name.startswith("test") or not inspect.isfunction(fn) or fn.__module__ != mod.__name__:
                continue
            if inspect.signature(fn).parameters:
                failed += 1
                print(f"ERROR {path}::{name}: takes arguments (fixtures are not supported)")
                continue
            try:
                fn()
            except BaseException as e:
                failed += 1
                print(f"FAILED {path}::{name}: {type(e).__name__}: {e}")
                traceback.print_exc(limit=-2, file=sys.stdout)
            else:
                passed += 1
                print(f"PASSED {path}::{name}")
    print(f"{passed} passed, {failed} failed")
    return 0 if passed and not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
