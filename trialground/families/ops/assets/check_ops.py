"""Hidden check of a trialground ops task: runs after the episode, cwd = the workspace; exit 0 = repaired.

It never trusts code the agent could have changed: services run from pristine copies held in SPEC against
the agent's configuration, and scripts the agent repaired run on fresh inputs whose answer this check
computes itself. Standard library only.
"""

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

SPEC_JSON = "{}"  # replaced by the task generator
SPEC = json.loads(SPEC_JSON)


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def run(cmd: list[str], cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = env or {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": cwd, "LANG": "C.UTF-8"}
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        fail(f"timed out: {' '.join(cmd)}")
        raise  # unreachable


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def scratch() -> str:
    # Inside the workspace: /tmp may be read-only or shared, the workspace is this check's own copy.
    return tempfile.mkdtemp(prefix=".check-", dir=os.getcwd())


def check_config() -> None:
    work = scratch()
    app = os.path.join(work, "service_check.py")
    write(app, SPEC["app"])
    write(SPEC["lock_path"], SPEC["lock"])  # the lock describes the machine, it is not the agent's to edit
    proc = run([sys.executable, "-I", "-S", app], cwd=os.getcwd())
    shutil.rmtree(work, ignore_errors=True)
    if proc.returncode != 0:
        fail(f"the service does not start: {(proc.stderr or proc.stdout).strip()[-300:]}")
    lines = proc.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("ready "):
        fail("the service did not report ready")
    got = dict(kv.split("=", 1) for kv in lines[-1].split()[1:] if "=" in kv)
    for key, want in SPEC["expect"].items():
        if got.get(key) != str(want):
            fail(f"{key} is {got.get(key)!r}, expected {want!r}: keep the settings that were right")
    print(f"ok: {lines[-1]}")


def _logs(rng: random.Random, log_dir: str, out_dir: str) -> tuple[dict[str, str], dict[str, int]]:
    files, lines_total, errors, users = {}, 0, 0, set()
    for i in range(rng.randint(3, 6)):
        rows = []
        for _ in range(rng.randint(5, 40)):
            user, level = f"user{rng.randint(1, 30)}", rng.choice(["INFO", "INFO", "WARN", "ERROR"])
            rows.append(f"2024-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}T10:00:00 {user} {level} event {i}")
            users.add(user)
            errors += level == "ERROR"
        rows.append(f"2024-01-01T00:00:00 user0 ERROR sentinel {i}")
        users.add("user0")
        errors += 1
        lines_total += len(rows)
        files[f"{log_dir}/app{i}.log"] = "\n".join(rows) + "\n"
    files[f"{log_dir}/notes.txt"] = "not a log: ERROR user99 must not be counted\n"
    files[f"{out_dir}/.keep"] = ""
    return files, {"lines": lines_total, "errors": errors, "users": len(users)}


def check_script() -> None:
    with open(SPEC["script"]) as f:
        script = f.read()
    for trial in range(2):
        files, answers = _logs(random.Random(SPEC["seed"] * 10 + trial), SPEC["log_dir"], SPEC["out_dir"])
        work = scratch()
        write(os.path.join(work, SPEC["script"]), script)
        for rel, text in files.items():
            write(os.path.join(work, rel), text)
        proc = run(["bash", SPEC["script"]], cwd=work)
        report = os.path.join(work, SPEC["out_dir"], "report.txt")
        got = None
        if os.path.exists(report):
            with open(report) as f:
                got = f.read().strip()
        shutil.rmtree(work, ignore_errors=True)
        if proc.returncode != 0:
            fail(f"{SPEC['script']} exits {proc.returncode}: {proc.stderr.strip()[-300:]}")
        want = f"{SPEC['metric']}={answers[SPEC['metric']]}"
        if got != want:
            fail(f"on fresh logs {SPEC['out_dir']}/report.txt holds {got!r}, expected {want!r}")
    print("ok: the report is right on fresh logs")


def check_env() -> None:
    nonce = os.urandom(8).hex()
    app = SPEC["app"].replace('NONCE = ""', f'NONCE = " nonce={nonce}"')
    write("service.py", app)  # the service is not the agent's to change: run the pristine one
    proc = run(["bash", "start.sh"], cwd=os.getcwd())
    if proc.returncode != 0:
        fail(f"start.sh exits {proc.returncode}: {proc.stderr.strip()[-300:]}")
    want = f"service up {SPEC['expect']} nonce={nonce}"
    if want not in proc.stdout.splitlines():
        fail(f"expected the line {want.rsplit(' nonce=', 1)[0]!r}, got {proc.stdout.strip()[-300:]!r}")
    print("ok: the service is up with the intended settings")


def check_import() -> None:
    with open(SPEC["service"]) as f:
        service = f.read()
    rng = random.Random(SPEC["seed"])
    totals: dict[str, int] = {}
    rows = []
    for _ in range(rng.randint(10, 30)):
        key, value = rng.choice(["alpha", "beta", "gamma", "delta", "omega"]), rng.randint(-50, 200)
        totals[key] = totals.get(key, 0) + value
        rows.append(f"{key} = {value}")
    work = scratch()
    write(os.path.join(work, SPEC["service"]), service)
    write(os.path.join(work, SPEC["helper_path"]), SPEC["helper"])
    write(os.path.join(work, SPEC["input"]), "\n".join(rows) + "\n")
    proc = run([sys.executable, "-s", "-E", SPEC["service"]], cwd=work)
    shutil.rmtree(work, ignore_errors=True)
    if proc.returncode != 0:
        fail(f"{SPEC['service']} exits {proc.returncode}: {proc.stderr.strip()[-300:]}")
    want = [f"{k} {totals[k]}" for k in sorted(totals)]
    if proc.stdout.strip().splitlines() != want:
        fail(f"on fresh input the output is {proc.stdout.strip()[-200:]!r}, expected {want!r}")
    print("ok: the service gives the right totals on fresh input")


if __name__ == "__main__":
    {"config": check_config, "script": check_script, "env": check_env, "import": check_import}[SPEC["kind"]]()
