"""The `httpdiag` family's scripted expert: reads the logs as an operator would (404s: the paths the
clients call; 401s: the header they send; 413s: the largest body; 504s: how long the handler took) and
changes that one key of config.json."""

from __future__ import annotations

import json
import re

from trialground.tasks.model import Task


def solve(task: Task) -> str | None:
    """The expert's config.json for `task`, or None when the logs show nothing it recognises."""
    config = json.loads(task.files["config.json"])
    access, errors = task.files["logs/access.log"], task.files["logs/error.log"]
    if m := re.search(r"\(request headers: ([^,]+),", errors):
        config["auth_header"] = m.group(1)
    elif m := re.search(r"took (\d+) ms >", errors):
        config["handler_timeout_ms"] = int(m.group(1))
    elif "413" in errors:
        config["max_body_bytes"] = max(int(b) for b in re.findall(r'" \d{3} (\d+) "', access))
    elif m := re.search(r'"[A-Z]+ (/api/v\d+)/[^"]*" 404', access):
        config["api_prefix"] = m.group(1)
    else:
        return None
    return json.dumps(config, indent=2) + "\n"
