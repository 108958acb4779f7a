"""Abuse of the sandbox service over real sockets: a real server process on 127.0.0.1 (port 0).

Unauthenticated and oversized bodies, slow-loris headers and bodies, malformed input of every kind. The
server runs in its own process so that its memory is read from /proc/<pid>/status (VmHWM: the peak, so
a body buffered and freed again still shows).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from trialground.sandbox.backends.bwrap.sandbox import bwrap_available

pytestmark = pytest.mark.security

TOKEN = "abuse-t0ken-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_BODY = 8 << 20
HEADER_TIMEOUT_S = 1.5
BODY_TIMEOUT_S = 2.0
MiB = 1 << 20


@dataclass
class Server:
    pid: int
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def memory_kb(self, field: str = "VmHWM") -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise AssertionError(f"{field} not in /proc/{self.pid}/status")

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        return sock


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    script = Path(__file__).with_name("service_server.py")
    args = [sys.executable, str(script), TOKEN, str(MAX_BODY), str(HEADER_TIMEOUT_S), str(BODY_TIMEOUT_S)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        srv = Server(proc.pid, port)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(srv.url + "/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.05)
        # Warm the routes' code paths so that later memory growth is the request's, not first-use costs.
        httpx.post(srv.url + "/sessions/nosuch/exec", json={"cmd": ["true"]}, headers=AUTH, timeout=30)
        yield srv
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Read one HTTP response to the end of the connection (refusals close it); status, headers, body."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 "), data[:200]
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


def _push(sock: socket.socket, total: int, chunked: bool = False) -> int:
    """Send up to `total` body bytes (1 MiB at a time) until the server stops taking them; bytes sent."""
    block = os.urandom(MiB)
    sent = 0
    try:
        while sent < total:
            if chunked:
                sock.sendall(b"%x\r\n" % len(block) + block + b"\r\n")
            else:
                sock.sendall(block)
            sent += len(block)
        if chunked:
            sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    return sent


def _closed_after(sock: socket.socket, drip: bytes, every_s: float, limit_s: float) -> float | None:
    """Send `drip` one byte every `every_s` until the server closes; seconds until then (None: never)."""
    start = time.monotonic()
    sock.settimeout(every_s)
    for byte in drip:
        if time.monotonic() - start > limit_s:
            return None
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
    return None


def _request_head(method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# -- authentication before the body -----------------------------------------------------------------------
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize("auth", [None, "Bearer wrong-token-0123456789"], ids=["no-token", "wrong-token"])
def test_a_big_unauthenticated_body_is_refused_unread(
    server: Server, chunked: bool, auth: str | None
) -> None:
    before = server.memory_kb()
    headers = {"Content-Type": "application/json"}
    headers |= {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(300 * MiB)}
    if auth:
        headers["Authorization"] = auth
    with server.connect() as sock:
        sock.sendall(_request_head("POST", "/sessions", headers))
        _push(sock, 300 * MiB, chunked=chunked)
        status, head, body = _response(sock)
    assert status == 401 and head.get("www-authenticate") == "Bearer"
    assert json.loads(body)["detail"] == "missing or wrong token"
    grown_mib = (server.memory_kb() - before) / 1024
    assert grown_mib < 24, f"the server's peak RSS grew by {grown_mib:.0f} MiB for a refused body"
    assert httpx.get(server.url + "/health", timeout=30).json()["sessions"] == 0


def test_a_declared_oversized_body_is_413_at_once(server: Server) -> None:
    before = server.memory_kb()
    headers = {**AUTH, "Content-Type": "application/json", "Content-Length": str(MAX_BODY + 1)}
    with server.connect() as sock:
        sock.sendall(_request_head("POST", "/sessions", headers))
        _push(sock, 64 * MiB)
        status, _, body = _response(sock)
    assert status == 413
    assert f"at most {MAX_BODY} bytes" in json.loads(body)["detail"]
    assert (server.memory_kb() - before) / 1024 < 24


def test_a_chunked_body_past_the_cap_is_413(server: Server) -> None:
    before = server.memory_kb()
    headers = {**AUTH, "Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    with server.connect() as sock:
        sock.sendall(_request_head("POST", "/sessions", headers))
        _push(sock, 200 * MiB, chunked=True)
        status, _, body = _response(sock)
    assert status == 413 and "exceeds the cap" in json.loads(body)["detail"]
    grown_mib = (server.memory_kb() - before) / 1024
    assert grown_mib < MAX_BODY / MiB * 3 + 24, f"peak RSS grew by {grown_mib:.0f} MiB"


def test_a_body_under_the_cap_still_works(server: Server) -> None:
    r = httpx.post(
        server.url + "/sessions/nosuch/exec", json={"cmd": ["x" * (MAX_BODY // 2)]}, headers=AUTH, timeout=60
    )
    assert r.status_code == 404 and "no such session" in r.json()["detail"]


# -- slow clients ---------------------------------------------------------------------------------------
def _health_keeps_answering(server: Server, stop: threading.Event, answered: list[float]) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        while not stop.is_set():
            t0 = time.monotonic()
            if client.get("/health").status_code == 200:
                answered.append(time.monotonic() - t0)
            time.sleep(0.1)


def test_slowloris_headers_are_cut_off_while_health_answers(server: Server) -> None:
    stop, answered = threading.Event(), []
    watcher = threading.Thread(target=_health_keeps_answering, args=(server, stop, answered))
    watcher.start()
    try:
        socks = [server.connect() for _ in range(20)]
        for s in socks[1:]:
            s.sendall(b"POST /sessions HTTP/1.1\r\nHost: x\r\n")  # and then nothing more
        drip = b"X-Padding: " + b"a" * 400
        took = _closed_after(socks[0], drip, every_s=0.1, limit_s=60)
        assert took is not None, "a client sending its headers byte by byte was never cut off"
        assert took >= HEADER_TIMEOUT_S * 0.9
        for s in socks[1:]:  # the silent ones were closed too
            s.settimeout(60)
            assert s.recv(100) == b""
            s.close()
        socks[0].close()
    finally:
        stop.set()
        watcher.join()
    assert len(answered) >= 3, "/health was not answered while slow clients held connections"


def test_slow_headers_on_a_kept_alive_connection_are_cut_off(server: Server) -> None:
    with server.connect() as sock:
        sock.sendall(_request_head("GET", "/health", {}))
        first = b""
        while b'"ok":true' not in first:
            first += sock.recv(65536)
        took = _closed_after(sock, b"GET /health HTTP/1.1\r\nX-A: " + b"b" * 400, every_s=0.1, limit_s=60)
    assert took is not None and took >= HEADER_TIMEOUT_S * 0.9


def test_a_slow_body_gets_408_and_the_connection_closed(server: Server) -> None:
    headers = {**AUTH, "Content-Type": "application/json", "Content-Length": "4000"}
    with server.connect() as sock:
        sock.sendall(_request_head("POST", "/sessions", headers))
        start = time.monotonic()
        sock.settimeout(0.1)
        reply = b""
        for _ in range(600):  # one byte every 0.1 s: the whole body would take 400 s
            try:
                sock.sendall(b" ")
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
            if not chunk:
                break
            reply += chunk
        took = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"not complete within" in reply
    assert BODY_TIMEOUT_S * 0.9 <= took < 60


# -- malformed input: 4xx with a message ----------------------------------------------------------------
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed")


@pytest.fixture
def session(server: Server) -> Iterator[tuple[httpx.Client, str]]:
    if not bwrap_available():
        pytest.skip("bubblewrap is not installed")
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
        r = client.post("/sessions", json={"files": {"a.txt": "QQ=="}})
        assert r.status_code == 200, r.text
        sid = r.json()["session_id"]
        try:
            yield client, f"/sessions/{sid}"
        finally:
            client.delete(f"/sessions/{sid}")


def _detail(r: httpx.Response) -> str:
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail, r.text
    return detail


@needs_bwrap
def test_invalid_base64_is_400_naming_the_field(session: tuple[httpx.Client, str]) -> None:
    client, base = session
    for bad in ("not base64!", "QQ", "QQ==QQ==x", "\u00e9\u00e9\u00e9\u00e9"):
        r = client.put(base + "/files", json={"path": "b.bin", "data_b64": bad})
        assert r.status_code == 400, (bad, r.text)
        assert "data_b64" in _detail(r) and "base64" in _detail(r)
    r = client.post(base + "/exec", json={"cmd": ["cat"], "stdin_b64": "%%%%"})
    assert r.status_code == 400 and "stdin_b64" in _detail(r)
    r = client.post("/sessions", json={"files": {"x.py": "@@@@"}})
    assert r.status_code == 400 and "files['x.py']" in _detail(r)
    assert client.get(base + "/files", params={"path": "a.txt"}).json()["data_b64"] == "QQ=="


@needs_bwrap
def test_bad_json_and_wrong_types_are_422_naming_the_field(session: tuple[httpx.Client, str]) -> None:
    client, base = session
    r = client.post(base + "/exec", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and "JSON" in _detail(r)
    r = client.post(base + "/exec", json={"cmd": 5})
    assert r.status_code == 422 and "cmd" in _detail(r)
    r = client.post(base + "/exec", json={"cmd": ["true"], "limits": {"wall_s": "soon"}})
    assert r.status_code == 422 and "wall_s" in _detail(r)
    r = client.post(base + "/exec", json=["true"])
    assert r.status_code == 422
    r = client.post(base + "/exec", json={"cmd": ["echo", "a\x00b"]})
    assert r.status_code == 422 and "NUL" in _detail(r)
    r = client.post(base + "/exec", json={"cmd": []})
    assert r.status_code == 400 and "empty command" in _detail(r)
    r = client.post("/sessions", json={"surprise": 1})
    assert r.status_code == 422 and "surprise" in _detail(r)


@needs_bwrap
def test_bad_paths_and_unknown_sessions_are_4xx(session: tuple[httpx.Client, str]) -> None:
    client, base = session
    for path in ("../outside", "/etc/passwd", "/workspace/../etc/passwd"):
        r = client.put(base + "/files", json={"path": path, "data_b64": "QQ=="})
        assert r.status_code == 400, (path, r.text)
        r = client.get(base + "/files", params={"path": path})
        assert r.status_code == 400, (path, r.text)
    r = client.get(base + "/files", params={"path": "a\x00b"})
    assert r.status_code == 400 and "NUL" in _detail(r)
    r = client.put(base + "/files", json={"path": "a\x00b", "data_b64": "QQ=="})
    assert r.status_code == 422 and "NUL" in _detail(r)
    assert client.get(base + "/files", params={"path": "missing"}).status_code == 404
    assert client.post(base + "/exec", json={"cmd": ["mkdir", "d"]}).json()["exit_code"] == 0
    r = client.get(base + "/files", params={"path": "d"})
    assert 400 <= r.status_code < 500, r.text
    _detail(r)
    r = client.post(base + "/restore", json={"snapshot_id": "nosuch"})
    assert r.status_code == 400, r.text
    for method, route in (("POST", "/exec"), ("GET", "/files?path=a"), ("POST", "/snapshot"),
                          ("POST", "/fork"), ("DELETE", "")):  # fmt: skip
        r = client.request(method, f"/sessions/nosuch{route}", json={"cmd": ["true"]})
        assert r.status_code == 404, (route, r.text)
        _detail(r)


@needs_bwrap
def test_a_file_read_that_blocks_does_not_stall_the_server(
    server: Server, session: tuple[httpx.Client, str]
) -> None:
    """A FIFO in the workspace: reading it may be refused or may wait, but never on the event loop."""
    client, base = session
    assert client.post(base + "/exec", json={"cmd": ["mkfifo", "pipe"]}).json()["exit_code"] == 0
    outcome: list[int] = []

    def read_pipe() -> None:
        try:
            with httpx.Client(base_url=server.url, headers=AUTH, timeout=20) as c:
                outcome.append(c.get(base + "/files", params={"path": "pipe"}).status_code)
        except httpx.TimeoutException:
            outcome.append(-1)

    reader = threading.Thread(target=read_pipe)
    reader.start()
    try:
        for _ in range(5):
            assert httpx.get(server.url + "/health", timeout=10).status_code == 200
            time.sleep(0.1)
        r = client.post(base + "/exec", json={"cmd": ["echo", "still here"]})
        assert r.json()["stdout"] == "still here\n"
    finally:
        # Unblock a read that is waiting for a writer, so the worker thread ends.
        client.post(base + "/exec", json={"cmd": ["sh", "-c", "echo > pipe"], "limits": {"wall_s": 2}})
        reader.join()
    assert outcome and (outcome[0] in (-1, 200) or 400 <= outcome[0] < 500), outcome
