"""How much of a repository task set its recorded calls cover, and whether they see each task's bug.

`--pristine REPO`: the repository's recorded calls made once more on its pristine library (the gold
patch of every task of it), in a fresh sandbox: every test whose compared calls come to another outcome
would fail a gold patch. Needs no task set.

    python benchmarks/swe_calls_coverage.py --pristine parse

For a task set, per task: how many of its FAIL_TO_PASS tests have recorded calls (a call whose outcome is
compared), and how many of those show the bug (the task's starting library, bug in place, brings a
compared call to another outcome). A task whose bug some FAIL_TO_PASS test's calls show cannot be paid
with the bug left in place, whatever the pytest run is made to say; the others rest on the pytest run.

    python benchmarks/swe_calls_coverage.py swe:inflection:40
"""

from __future__ import annotations

import asyncio
import sys
import time

from trialground.sandbox.base import SandboxConfig
from trialground.tasks.sources import load_source
from trialground.tasks.swe.build import workspace_image_files
from trialground.tasks.swe.calls import calls_image_files, library_path, mismatch, record_calls, replay
from trialground.tasks.swe.image import RepoImage
from trialground.tasks.swe.paths import classify
from trialground.tasks.swe.repos import repo_files, repo_spec
from trialground.tasks.verifiers import SweTestsParams


async def pristine(repo: str) -> None:
    spec = repo_spec(repo)
    config = SandboxConfig()
    t0 = time.time()
    book = await record_calls(spec, config)
    took = time.time() - t0
    print(f"{repo}: {len(book.tests)} of {book.recorded} passing tests have compared calls ({took:.0f} s)")
    image = RepoImage(config, calls_image_files(spec, workspace_image_files(spec)))
    limits = config.limits.model_copy(update={"wall_s": 600.0, "cpu_s": 600.0, "output_bytes": 64 << 20})
    try:
        t0 = time.time()
        async with image.lease() as sandbox:
            got = await replay(sandbox, list(book.tests.values()), limits, library_path(spec))
        off = [t for t, r in book.tests.items() if mismatch(r, got.get(t)) is not None]
    finally:
        await image.close()
    steps = sum(len(r.steps) for r in book.tests.values())
    compared = sum(sum(r.compared) for r in book.tests.values())
    print(
        f"{repo}: pristine replay ({time.time() - t0:.0f} s): {len(off)} of {len(book.tests)} tests differ; "
        f"{compared} of {steps} calls compared"
    )
    for t in off[:10]:
        print(f"  differs: {t}")


async def main(source: str) -> None:
    tasks = load_source(source)
    spec = repo_spec(tasks[0].verifier.params_as(SweTestsParams).repo)
    config = SandboxConfig()
    t0 = time.time()
    book = await record_calls(spec, config)
    took = time.time() - t0
    print(f"book: {len(book.tests)} of {book.recorded} passing tests have compared calls ({took:.0f} s)")
    image = RepoImage(config, calls_image_files(spec, workspace_image_files(spec)))
    pristine = repo_files(spec)
    covered = seen = f2p_total = f2p_recorded = f2p_showing = 0
    try:
        for task in tasks:
            f2p = list(task.verifier.params_as(SweTestsParams).fail_to_pass)
            recorded = book.for_tests(f2p)
            f2p_total += len(f2p)
            f2p_recorded += len(recorded)
            if not recorded:
                print(f"{task.id}: no FAIL_TO_PASS test has recorded calls")
                continue
            covered += 1
            async with image.lease() as sandbox:
                for path, text in task.files.items():
                    if classify(spec, path) == "library" and pristine.get(path) != text:
                        await sandbox.write(path, text)
                got = await replay(sandbox, recorded, config.limits.model_copy(update={"wall_s": 120.0,
                                   "cpu_s": 120.0, "output_bytes": 8 << 20}), library_path(spec))  # fmt: skip
            showing = sum(mismatch(r, got.get(r.test)) is not None for r in recorded)
            f2p_showing += showing
            seen += showing > 0
            print(f"{task.id}: {len(recorded)}/{len(f2p)} FAIL_TO_PASS recorded, {showing} show the bug")
    finally:
        await image.close()
    print(
        f"{source}: {len(tasks)} tasks; FAIL_TO_PASS tests with recorded calls {f2p_recorded}/{f2p_total}, "
        f"showing the bug {f2p_showing}; tasks whose bug the calls show {seen}/{len(tasks)} "
        f"(with any recorded FAIL_TO_PASS test: {covered})"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pristine"]:
        asyncio.run(pristine(sys.argv[2]))
    else:
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "swe:inflection:40"))
