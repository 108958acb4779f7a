"""SandboxFusion's `/run_code` on a real `trialground sandbox serve`, driven by SandboxFusion's own client
package (`sandbox_fusion.run_code`) and by verl's own sandbox-fusion reward code, unchanged."""

from __future__ import annotations

import base64
import importlib.util
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from interop_servers import Served, serve

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available

sandbox_fusion = pytest.importorskip("sandbox_fusion")
pytestmark = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")

TOKEN = "sf-test-token-0123456789abcdef"
RunCodeRequest = sandbox_fusion.RunCodeRequest


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    token_file = tmp_path_factory.mktemp("sf") / "token"
    token_file.write_text(TOKEN + "\n")
    args = ["sandbox", "serve", "--host", "127.0.0.1", "--port", "0", "--token-file", str(token_file)]
    with serve(args) as served:
        yield served


@pytest.fixture(scope="module")
def endpoint(server: Served) -> str:
    """What a SandboxFusion user sets as SANDBOX_FUSION_ENDPOINT."""
    return f"{server.url}/sf/{TOKEN}"


def run(endpoint: str, code: str, language: str = "python", **fields: object):  # type: ignore[no-untyped-def]
    request = RunCodeRequest(code=code, language=language, **fields)
    return sandbox_fusion.run_code(request, endpoint=endpoint, max_attempts=1)


def test_good_code_succeeds(endpoint: str) -> None:
    r = run(endpoint, "import sys\nprint('hello', sys.stdin.read(), __name__)", stdin="from stdin")
    assert r.status == "Success" and r.compile_result is None
    assert r.run_result.status == "Finished" and r.run_result.return_code == 0
    assert r.run_result.stdout == "hello from stdin __main__\n" and r.run_result.stderr == ""
    assert r.run_result.execution_time is not None and r.run_result.execution_time > 0
    r = run(endpoint, 'echo "$((6 * 7))"; echo err >&2', language="bash")
    assert (r.status, r.run_result.stdout, r.run_result.stderr) == ("Success", "42\n", "err\n")


def test_failing_code_is_failed_with_its_exit_status_and_traceback(endpoint: str) -> None:
    r = run(endpoint, "def f():\n    raise ValueError('boom')\nf()")
    assert r.status == "Failed" and r.run_result.status == "Finished"
    assert r.run_result.return_code == 1 and "ValueError: boom" in r.run_result.stderr
    r = run(endpoint, "exit 7", language="bash")
    assert (r.status, r.run_result.status, r.run_result.return_code) == ("Failed", "Finished", 7)


def test_timed_out_code_is_failed_with_time_limit_exceeded(endpoint: str) -> None:
    r = run(endpoint, "print('started', flush=True)\nwhile True:\n    pass", run_timeout=1)
    assert r.status == "Failed" and r.run_result.status == "TimeLimitExceeded"
    assert r.run_result.return_code is None and r.run_result.stdout == "started\n"
    assert "time limit" in r.message
    r = run(endpoint, "sleep 30", language="bash", run_timeout=0.5)
    assert (r.status, r.run_result.status) == ("Failed", "TimeLimitExceeded")


def test_files_in_and_fetch_files_out(endpoint: str) -> None:
    files = {
        "data/in.txt": base64.b64encode(b"abc\x00").decode(),
        "helper.py": base64.b64encode(b"X = 5").decode(),
    }
    code = "import helper\nd = open('data/in.txt', 'rb').read()\nopen('out.bin', 'wb').write(d * helper.X)"
    r = run(endpoint, code, files=files, fetch_files=["out.bin", "missing.txt"])
    assert r.status == "Success", r
    assert base64.b64decode(r.files["out.bin"]) == b"abc\x00" * 5
    assert "missing.txt" not in r.files and "missing.txt: no such file" in r.message


def test_memory_limit(endpoint: str) -> None:
    # The client package's request has no memory_limit_MB; verl sends it (as raw JSON, like here).
    body = {"code": "x = b'x' * (400 << 20)\nprint('allocated')", "language": "python", "memory_limit_MB": 64}
    r = httpx.post(f"{endpoint}/run_code", json=body, timeout=60).json()
    assert r["status"] == "Failed" and "allocated" not in r["run_result"]["stdout"], r
    body["memory_limit_MB"] = 1024
    assert httpx.post(f"{endpoint}/run_code", json=body, timeout=60).json()["status"] == "Success"


def test_host_files_are_unreadable(endpoint: str) -> None:
    marker = os.urandom(6).hex()
    home = Path("/root") if os.geteuid() == 0 else Path.home()
    secrets = [Path("/tmp") / f"tg-sf-secret-{marker}", home / f".tg-sf-secret-{marker}"]
    for secret in secrets:
        secret.write_text(f"HOST-SECRET-{marker}")
    try:
        paths = [*map(str, secrets), str(Path.cwd() / "pyproject.toml")]
        code = (
            f"for p in {paths!r}:\n"
            "    try:\n        print(p, open(p).read())\n"
            "    except OSError as e:\n        print(p, type(e).__name__)\n"
        )
        r = run(endpoint, code)
        assert r.status == "Success", r
        assert marker not in r.run_result.stdout.replace(paths[0], "").replace(paths[1], ""), r.run_result
        assert r.run_result.stdout.count("FileNotFoundError") == 3, r.run_result.stdout
    finally:
        for secret in secrets:
            secret.unlink()


def test_no_network_not_even_the_server_itself(endpoint: str, server: Served) -> None:
    port = int(server.url.rsplit(":", 1)[1])
    listener = socket.create_server(("127.0.0.1", 0))
    code = (
        "import socket\n"
        f"for host, port in (('127.0.0.1', {port}), ('127.0.0.1', {listener.getsockname()[1]}), "
        "('1.1.1.1', 53), ('10.0.2.2', 53)):\n"
        "    s = socket.socket()\n    s.settimeout(2)\n"
        "    try:\n        s.connect((host, port))\n        print('CONNECTED', host)\n"
        "    except OSError as e:\n        print('refused', host, type(e).__name__)\n"
    )
    try:
        r = run(endpoint, code)
    finally:
        listener.close()
    assert r.status == "Success" and "CONNECTED" not in r.run_result.stdout, r
    assert r.run_result.stdout.count("refused") == 4


def test_other_languages_are_refused_with_a_sandbox_error(endpoint: str) -> None:
    with pytest.raises(
        Exception, match=r"language 'cpp' is not supported by this server \(supported: bash, python\)"
    ):
        run(endpoint, "int main() {}", language="cpp")
    body = {"code": "print(1)", "language": "python", "memory_limit_MB": 1}
    r = httpx.post(f"{endpoint}/run_code", json=body, timeout=60).json()
    assert r["status"] == "SandboxError" and "memory_limit_MB" in r["message"], r
    r = httpx.post(f"{endpoint}/run_code", json={"language": "python"}, timeout=60)
    assert r.status_code == 422 and "code" in r.json()["detail"]


def test_the_token_is_required_and_never_logged(server: Served, endpoint: str) -> None:
    body = {"code": "open('/workspace/x', 'w')", "language": "python"}
    with pytest.raises(Exception, match="401"):
        sandbox_fusion.run_code(
            RunCodeRequest(**body), endpoint=f"{server.url}/sf/wrong-token", max_attempts=1
        )
    assert httpx.post(f"{server.url}/run_code", json=body, timeout=60).status_code == 401
    headers = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{server.url}/run_code", json=body, headers=headers, timeout=60)
    assert r.status_code == 200 and r.json()["status"] == "Success"
    # only the SandboxFusion routes exist under the token prefix: the native API needs the header
    assert httpx.post(f"{endpoint}/sessions", json={}, timeout=60).status_code == 404
    assert httpx.get(f"{endpoint}/v1/ping", timeout=60).json() == "pong"
    log = "".join(server.log)
    assert "/run_code" in log and TOKEN not in log


def _load_verl_sandbox_fusion() -> ModuleType:
    """verl's own `verl/utils/reward_score/sandbox_fusion` package, loaded from its installed files
    without `verl/__init__.py` (which imports verl's training stack: torch, tensordict, ray)."""
    import sys

    vendored = Path(sys.prefix) / "vendor" / "verl" / "verl"  # where ./dev puts it (no dependencies)
    spec = importlib.util.find_spec("verl")
    if vendored.is_dir():
        root = vendored
    elif spec is not None and spec.submodule_search_locations:
        root = Path(spec.submodule_search_locations[0])
    else:
        pytest.skip("verl is not installed (pip install --no-deps --target .venv/vendor/verl verl)")
    folder = root / "utils" / "reward_score" / "sandbox_fusion"
    package = importlib.util.spec_from_file_location(
        "verl_sandbox_fusion", folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    assert package is not None and package.loader is not None
    module = importlib.util.module_from_spec(package)
    sys.modules[package.name] = module
    package.loader.exec_module(module)
    return module


def test_verls_sandbox_fusion_reward_code(endpoint: str) -> None:
    verl_sf = _load_verl_sandbox_fusion()
    url = f"{endpoint}/run_code"  # verl's sandbox_fusion.url
    tests = {"inputs": ["1 2\n", "5 7\n"], "outputs": ["3\n", "12\n"]}
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    score, meta = verl_sf.compute_score(url, None, 256, good, tests, timeout=10)
    assert score == 1.0 and [m["status"] for m in meta] == ["success", "success"], meta
    wrong = "```python\nprint(3)\n```"
    score, meta = verl_sf.compute_score(url, None, 256, wrong, tests, timeout=10)
    assert score == 0.5 and [m["status"] for m in meta] == ["success", "wrong_answer"], meta
    crash = "```python\nraise SystemExit(4)\n```"
    results, meta = verl_sf.utils.check_correctness(url, tests, crash.split("```python")[1][:-3], timeout=10)
    assert results == [-2, -2] and meta[0]["exit_code"] == 4, meta
    slow = "import time\ntime.sleep(30)"
    results, meta = verl_sf.utils.check_correctness(url, {"inputs": [""], "outputs": [""]}, slow, timeout=1)
    assert results == [-3] and meta[0]["status"] == "timeout", meta
    # verl's function-call wrapper (fn_name): JSON arguments on stdin, the result printed as JSON
    fn = "class Solution:\n    def add(self, a, b):\n        return a + b\n"
    results, _ = verl_sf.utils.check_correctness(
        url, {"inputs": ["1\n2"], "outputs": ["3"], "fn_name": "add"}, fn, timeout=10
    )
    assert results == [True]


def test_nothing_of_one_request_reaches_the_next(endpoint: str) -> None:
    leave = (
        "echo left > /workspace/left.txt; echo left > /tmp/left.txt; echo left > /dev/shm/left.txt; "
        "(sleep 60 &); echo done"
    )
    assert run(endpoint, leave, language="bash").status == "Success"
    procs = "[open(f'/proc/{p}/cmdline').read() for p in os.listdir('/proc') if p.isdigit()]"
    show = f"import os, sys; print({procs}, 'site' in sys.modules)"
    look = f'ls -a /workspace /tmp /dev/shm; python3 -c "{show}"'
    for _ in range(3):  # ready sandboxes and fresh ones alike
        r = run(endpoint, look, language="bash")
        assert r.status == "Success" and "left.txt" not in r.run_result.stdout, r.run_result
        assert "sleep" not in r.run_result.stdout and r.run_result.stdout.endswith(" True\n"), r.run_result
