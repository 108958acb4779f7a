"""Importing a sandbox's preloaded modules (`sandbox.preload`): runs INSIDE the sandbox, in its PID 1,
standard library only.

The supervisor (`supervisor.py`) receives this module's code from the host with the preload request, the
sandbox's first, and runs `preload` once, before any command; it refuses the request itself once a command
has run. `preload` imports the named modules with the given directories ahead of the standard library on
`sys.path`, then puts the import machinery's state back (sys.path, meta_path, path hooks and their cache):
the modules stay in `sys.modules`, nothing else changes for later commands. A module that fails to import is
reported, never fatal to PID 1.
"""

import gc
import importlib
import resource
import sys


def vm_kb() -> int:
    """This process's address-space size (VmSize), which RLIMIT_AS caps in every child it forks."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def preload(modules: list, path: list, base_path: list) -> "tuple[dict, list[str]]":
    """Import `modules` with `path` then `base_path` as sys.path; returns the answer for the host (what was
    loaded, what failed, the memory and address space it took) and the names it added to sys.modules."""
    saved = (list(sys.path), list(sys.meta_path), list(sys.path_hooks), dict(sys.path_importer_cache))
    before, rss, vm = set(sys.modules), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, vm_kb()
    sys.path[:] = [*path, *base_path]
    loaded, errors = [], []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except BaseException as exc:  # reported, never fatal to PID 1
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    sys.path[:], sys.meta_path[:], sys.path_hooks[:] = saved[0], saved[1], saved[2]
    sys.path_importer_cache.clear()
    sys.path_importer_cache.update(saved[3])
    added = sorted(set(sys.modules) - before)
    gc.collect()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss
    answer = {"loaded": loaded, "errors": errors, "rss_kb": rss_kb, "vm_kb": max(0, vm_kb() - vm)}
    answer["modules"] = len(added)
    return answer, added
