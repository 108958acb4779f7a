"""Hidden check of a trialground gitrepair task: runs after the episode; exit 0 = solved.

For the workspace's scenario and for a hidden one of the same kind (other file contents), this check runs
its own copy of the build script in a fresh directory, records what the repaired repository must hold
(commit ids, trees, file contents) with real `git`, then runs a copy of the agent's `fix.sh` inside that
repository under a timeout and inspects the result with git plumbing. The repository's `.git` must stay a
real directory and its `config` byte-identical (so no filter, fsmonitor or hook the script configured runs
during the inspection). This process is made undumpable first; the script's exit status and output are
ignored. Standard library only.
"""

import os
import shutil
import stat
import subprocess
import tempfile

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, submission

SPEC_JSON = "{}"  # replaced by the task generator
MAX_SCRIPT = 20_000
SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.pager=cat")


class Broken(Exception):
    """The repository is not in the state the task asks for."""


def environment(home: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": home, "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "Dev", "GIT_AUTHOR_EMAIL": "dev@example.org",
            "GIT_COMMITTER_NAME": "Dev", "GIT_COMMITTER_EMAIL": "dev@example.org", "GIT_EDITOR": "true",
            "GIT_TERMINAL_PROMPT": "0"}  # fmt: skip


class Repo:
    def __init__(self, git: str, path: str, home: str) -> None:
        self.git, self.path, self.env = git, path, environment(home)

    def run(self, *args: str, ok: bool = True) -> str | None:
        argv = [self.git, *SAFE, "-C", self.path, *args]
        done = subprocess.run(argv, env=self.env, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        if done.returncode != 0:
            if ok:
                raise Broken(f"`git {' '.join(args)}` failed: {done.stderr.decode('utf-8', 'replace')[:200]}")
            return None
        return done.stdout.decode("utf-8", "replace")

    def rev(self, name: str) -> str | None:
        out = self.run("rev-parse", "-q", "--verify", name + "^{commit}", ok=False)
        return out.strip() if out else None


def expectations(repo: Repo, kind: str, params: dict) -> dict:
    """What the repaired repository must hold, recorded from the broken one before the script runs."""
    want = {"main": repo.rev("refs/heads/main")}
    if kind == "conflict":
        want["feature"] = repo.rev("refs/heads/" + params["branch"])
    elif kind == "detached":
        want["lost"] = repo.rev("HEAD@{1}")
    elif kind == "revert":
        want["tree"] = repo.run("ls-tree", "-r", "HEAD")
    elif kind == "wrongbranch":
        want["base"] = repo.rev(f"HEAD~{params['k']}")
    elif kind == "restore":
        with open(os.path.join(repo.path, params["keep"]), encoding="utf-8") as f:
            want["keep"] = f.read()
    return want


def clean_status(repo: Repo, allowed: str = "") -> None:
    status = repo.run("status", "--porcelain", "--untracked-files=all") or ""
    if status != allowed:
        raise Broken(f"the working tree is not clean: {status[:200]!r}")


def on_main(repo: Repo) -> None:
    if (repo.run("symbolic-ref", "-q", "HEAD", ok=False) or "").strip() != "refs/heads/main":
        raise Broken("HEAD is not the branch main")


def inspect(repo: Repo, kind: str, params: dict, want: dict, expected: dict) -> None:
    on_main(repo)
    head = repo.rev("HEAD")
    if kind == "conflict":
        parents = (repo.run("rev-list", "--parents", "-n", "1", "HEAD") or "").split()[1:]
        if parents != [want["main"], want["feature"]]:
            raise Broken("HEAD is not a merge commit of main's tip and the feature branch")
        if repo.run("show", f"HEAD:{params['file']}") != expected["content"]:
            raise Broken(f"{params['file']} at HEAD does not hold both sides' lines in order")
        if repo.rev("MERGE_HEAD") is not None:
            raise Broken("the merge is still in progress")
        clean_status(repo)
    elif kind == "detached":
        if repo.rev("refs/heads/rescue") != want["lost"]:
            raise Broken("branch rescue does not point at the lost commit")
        if head != want["main"]:
            raise Broken("main moved")
        clean_status(repo)
    elif kind == "revert":
        if repo.rev("HEAD^") != want["main"]:
            raise Broken("HEAD is not one new commit on top of the old main")
        tree = "".join(
            line + "\n" for line in want["tree"].splitlines() if not line.endswith("\t" + params["file"])
        )
        if repo.run("ls-tree", "-r", "HEAD") != tree:
            raise Broken("HEAD's tree is not the old tree without the wrong file")
        clean_status(repo)
    elif kind == "wrongbranch":
        if repo.rev("refs/heads/" + params["branch"]) != want["main"]:
            raise Broken(f"branch {params['branch']} does not hold the moved commits")
        if head != want["base"]:
            raise Broken(f"main is not back at the commit before the last {params['k']}")
        clean_status(repo)
    elif kind == "restore":
        if head != want["main"]:
            raise Broken("main moved")
        clean_status(repo, f"?? {params['keep']}\n")
        with open(os.path.join(repo.path, params["keep"]), encoding="utf-8") as kept:
            if kept.read() != want["keep"]:
                raise Broken(f"{params['keep']} changed")
    else:
        raise Broken(f"unknown scenario {kind!r}")


def config_bytes(path: str) -> bytes:
    git_dir = os.path.join(path, ".git")
    if not stat.S_ISDIR(os.lstat(git_dir).st_mode):
        raise Broken(".git is not a directory")
    fd = os.open(os.path.join(git_dir, "config"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Broken(".git/config is not a regular file")
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def scenario(git: str, spec: dict, build: str, expected: dict, script: str) -> str | None:
    """None when the script repairs this scenario, else what is wrong."""
    home = tempfile.mkdtemp(prefix="tg-git-")
    try:
        path = os.path.join(home, "repo")
        os.mkdir(path)
        env = environment(home)
        subprocess.run(["bash", "-c", build], cwd=home, env=env, stdin=subprocess.DEVNULL,
                       capture_output=True, check=True, timeout=60)  # fmt: skip
        repo = Repo(git, path, home)
        want = expectations(repo, spec["kind"], spec["params"])
        config = config_bytes(path)
        with open(os.path.join(home, "fix.sh"), "w", encoding="utf-8") as f:
            f.write(script)
        try:
            argv = ["bash", os.path.join(home, "fix.sh")]
            limit = spec["timeout_s"]
            subprocess.run(
                argv, cwd=path, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=limit
            )
        except subprocess.TimeoutExpired:
            return f"fix.sh ran past {spec['timeout_s']} s"
        if config_bytes(path) != config:
            raise Broken(".git/config was changed")
        inspect(repo, spec["kind"], spec["params"], want, expected)
        return None
    except Broken as e:
        return str(e)
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot inspect the repository: {e}"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec, script = submission(SPEC_JSON, MAX_SCRIPT)
    git = shutil.which("git", path="/usr/bin:/bin")
    if git is None:
        return "git is not installed in the sandbox"
    cases = (("workspace repository", spec["build"], spec["expected"]),
             ("hidden repository", spec["hidden_build"], spec["hidden_expected"]))  # fmt: skip
    for label, build, expected in cases:
        problem = scenario(git, spec, build, expected, script)
        if problem is not None:
            return f"{label}: {problem}"
    return None


if __name__ == "__main__":
    finish(main)
