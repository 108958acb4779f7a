"""`trialground tasks list` without a source lists the registered sources, the families among them."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from trialground.cli import app


def test_the_sources_are_listed_with_the_families() -> None:
    res = CliRunner().invoke(app, ["tasks", "list", "--json"])
    assert res.exit_code == 0, res.output
    rows = {row["name"]: row for row in map(json.loads, res.stdout.splitlines())}
    assert {"sql", "scicomp", "shell", "cleaning", "httpdiag", "codegen", "ops"} <= set(rows)
    assert {"depgraph", "jsonxform", "cron", "configfix", "csvjoin", "intervals"} <= set(rows)
    assert len(rows) >= 20  # the shipped pool: at least 20 sources
    assert rows["sql"]["generator"] is True and rows["sql"]["default_n"] == 200
