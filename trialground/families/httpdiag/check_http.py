"""Hidden check of a trialground httpdiag task: runs after the episode, cwd = the workspace; exit 0 = fixed.

The agent's `config.json` (a bounded regular file) must be a JSON object with the original keys, every
value as it was except the faulty one, and that one within the bounds the prompt states. Then the pristine
service (an embedded copy of `app.py`, never the workspace's) is started in this process with that
configuration on a free loopback port, and the clients' requests (and others like them the agent never
saw) must all get their 200 answers. Standard library only.
"""

import json
import threading
import types
import urllib.error
import urllib.request

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, read_regular

SPEC_JSON = "{}"  # replaced by the task generator
MAX_CONFIG = 20_000


def read_config(path: str) -> object:
    return json.loads(read_regular(path, MAX_CONFIG))


def problems(config: object, spec: dict) -> list[str]:
    original, key = spec["original"], spec["key"]
    if not isinstance(config, dict) or set(config) != set(original):
        return [f"config.json must keep exactly the keys {sorted(original)}"]
    out = [f"{k} was changed" for k in original if k != key and config[k] != original[k]]
    value, rule = config[key], spec["rule"]
    if rule["type"] == "equals" and value != rule["value"]:
        out.append(f"{key} is still wrong")
    if rule["type"] == "range" and not (type(value) is int and rule["low"] <= value <= rule["high"]):
        out.append(f"{key} must be an integer in what the clients need, at most {rule['high']}")
    return out


def call(port: int, request: dict) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{request['path']}",
        data=b"x" * request["body"] if request["method"] == "POST" else None,
        headers=request["headers"],
        method=request["method"],
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec = json.loads(SPEC_JSON)
    try:
        config = read_config(spec["solution"])
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return f"cannot read config.json: {e}"
    found = problems(config, spec)
    if found:
        return "; ".join(found)
    app = types.ModuleType("pristine_app")
    exec(compile(spec["app"], "app.py", "exec"), app.__dict__)
    server = app.serve(config)
    server.RequestHandlerClass.log_message = lambda *a: None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for request in spec["requests"]:
            status = call(server.server_address[1], request)
            if status != 200:
                return f"{request['method']} {request['path']}: {status}"
    finally:
        server.shutdown()
    return None


if __name__ == "__main__":
    finish(main)
