"""Hidden check of a trialground SQL task: runs after the episode with cwd = the workspace; exit 0 = solved.

It never trusts what the agent could change: both databases are built here from copies embedded in SPEC
(the workspace's data, and a hidden dataset of the same schema the agent never saw), the agent's query
(`query.sql`, a regular file, read once and bounded) runs on each under an authorizer that allows reading
only (no ATTACH, PRAGMA, writes or schema changes) and a step budget, and its rows must equal the
reference query's rows on both: in order when the question asks for an order, as a multiset otherwise.
Standard library only.
"""

import json
import sqlite3

if "." in __name__:  # imported on the host; shipped, check_helpers.py stands first in the same file
    from trialground.families.check_helpers import finish, read_regular

SPEC_JSON = "{}"  # replaced by the task generator
MAX_QUERY_BYTES = 20_000
MAX_ROWS = 5_000
STEP_BUDGET = 20_000  # progress-handler calls of 1,000 virtual-machine steps each

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}


def read_query(path: str) -> str:
    return read_regular(path, MAX_QUERY_BYTES)


def database(schema: str, data: str) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.executescript(schema + data)
    steps = [0]

    def budget() -> int:
        steps[0] += 1
        return 1 if steps[0] > STEP_BUDGET else 0

    conn.set_progress_handler(budget, 1000)
    conn.set_authorizer(lambda action, *_: sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY)
    return conn


def normal(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return [tuple(round(v, 6) if isinstance(v, float) else v for v in row) for row in rows]


def run(conn: sqlite3.Connection, query: str) -> list[tuple[object, ...]]:
    cursor = conn.execute(query)
    rows = cursor.fetchmany(MAX_ROWS + 1)
    if len(rows) > MAX_ROWS:
        raise ValueError(f"more than {MAX_ROWS} rows")
    return normal(rows)


def main() -> str | None:
    """Why the submission fails, or None when it passes."""
    spec = json.loads(SPEC_JSON)
    try:
        query = read_query(spec["solution"]).strip().rstrip(";").strip()
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return f"cannot read the query: {e}"
    if not query:
        return "query.sql is empty"
    for label, data in (("workspace data", spec["data"]), ("hidden data", spec["hidden_data"])):
        conn = database(spec["schema"], data)
        want = run(conn, spec["reference"])
        try:
            got = run(conn, query)
        except (sqlite3.Error, ValueError, OverflowError) as e:
            return f"{label}: the query failed: {type(e).__name__}: {e}"
        same = got == want if spec["ordered"] else sorted(map(repr, got)) == sorted(map(repr, want))
        if not same:
            return f"{label}: {len(got)} rows, expected {len(want)}; first: {got[:2]!r} vs {want[:2]!r}"
    return None


if __name__ == "__main__":
    finish(main)
