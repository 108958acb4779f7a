"""The SWE diff policy's false positives: on every gold patch of the cached task sets, and on real upstream
changes (each library file changed between consecutive pinned releases of the task repositories).

    python benchmarks/swe_policy.py            # prints one line per corpus and every refused change

The older releases are read from the sdist cache (`~/.cache/trialground/swe/sdists/`, checked against the
sha256 pinned here); put them there with `pip download --no-deps --no-binary :all: NAME==VERSION -d DIR`.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time

from trialground.tasks.swe.patch import apply_patch
from trialground.tasks.swe.policy import added_violations
from trialground.tasks.swe.repos import REPOS, cache_dir, is_library, repo_files

_SRC = "https://files.pythonhosted.org/packages/source"
# (repo, version, sdist file name, sha256): older releases, oldest first; the pinned release comes last.
OLDER = [
    ("inflection", "0.5.0", "inflection-0.5.0.tar.gz",
     "f576e85132d34f5bf7df5183c2c6f94cfb32e528f53065345cf71329ba0b8924"),
    ("parse", "1.21.1", "parse-1.21.1.tar.gz",
     "825e1a88e9d9fb481b8d2ca709c6195558b6eaa97c559ad3a9a20aa2d12815a3"),
    ("parse", "1.22.2", "parse-1.22.2.tar.gz",
     "8ff0b98202798b8cefa4f8fac06b670d6d00e5ec6ecbbacaf97ac0d0e93a54e6"),
    ("parse", "1.22.3", "parse-1.22.3.tar.gz",
     "7e79bb39c72c3bf1613510fd5cdffe5baa9a7873892bef1d4566f1672c8a42f4"),
    ("boltons", "24.1.0", "boltons-24.1.0.tar.gz",
     "4a49b7d57ee055b83a458c8682a2a6f199d263a8aa517098bda9bab813554b87"),
    ("boltons", "25.0.0", "boltons-25.0.0.tar.gz",
     "e110fbdc30b7b9868cb604e3f71d4722dd8f4dcb4a5ddd06028ba8f1ab0b5ace"),
    ("more-itertools", "10.7.0", "more_itertools-10.7.0.tar.gz",
     "9fddd5403be01a94b204faadcff459ec3568cf110265d3c54323e1e866ad29d3"),
    ("more-itertools", "11.1.0", "more_itertools-11.1.0.tar.gz",
     "48e8f4d9e7e5878571ecf6f2b4e57634f93cd474cc8cfbd2376f2d11b396e30d"),
    ("more-itertools", "11.2.0", "more_itertools-11.2.0.tar.gz",
     "59960f488835254863a857eb501f69e4ec92fdc8822f098c0f48dba530afd487"),
]  # fmt: skip


def upstream() -> tuple[int, list[str]]:
    checked, refused = 0, []
    for name, spec in REPOS.items():
        chain = [
            dataclasses.replace(spec, version=v, url=f"{_SRC}/{file[0]}/{name}/{file}", sha256=sha)
            for repo, v, file, sha in OLDER
            if repo == name
        ] + [spec]
        trees = [repo_files(s) for s in chain]
        for (a, old), (b, new) in itertools.pairwise(zip(chain, trees, strict=True)):
            for path in sorted(set(new)):
                if path.endswith(".py") and is_library(spec, path) and old.get(path) != new[path]:
                    checked += 1
                    found = added_violations(old.get(path), new[path])
                    if found:
                        refused.append(f"{name} {a.version}->{b.version} {path}: {found[:3]}")
    return checked, refused


def golds() -> tuple[int, list[str]]:
    checked, refused = 0, []
    for cached in sorted((cache_dir() / "tasks").glob("*.json")):
        body = json.loads(cached.read_text())
        spec = REPOS[body["repo"]]
        pristine = repo_files(spec)
        for record in body["records"]:
            checked += 1
            start = {**pristine, record["path"]: record["text"]}
            from trialground.tasks.swe.patch import make_patch

            gold = make_patch(start, {record["path"]: pristine[record["path"]]})
            for path, text in apply_patch(start, gold).items():
                found = added_violations(start.get(path), text)
                if found:
                    refused.append(f"{cached.name} {path}: {found[:3]}")
    return checked, refused


def main() -> int:
    t = time.time()
    n_gold, bad_gold = golds()
    n_up, bad_up = upstream()
    print(f"gold patches: {n_gold} checked, {len(bad_gold)} refused")
    print(f"upstream release changes (library files): {n_up} checked, {len(bad_up)} refused")
    for line in bad_gold + bad_up:
        print("  refused:", line)
    print(f"{time.time() - t:.1f} s")
    return 1 if bad_gold or bad_up else 0


if __name__ == "__main__":
    sys.exit(main())
