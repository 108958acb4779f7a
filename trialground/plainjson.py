"""JSON from untrusted text, parsed totally: size, nesting depth and number length are bounded before the
parser sees the text.

`json.loads` is not total on hostile input: a 5,000-digit integer raises `ValueError` (Python's limit on
int conversion), a few thousand nested brackets raise `RecursionError`, and a huge document holds the
caller for as long as it takes. Every parser of model output and every request body goes through `loads`,
which checks the three bounds with one linear scan (strings skipped, so text inside them is never
counted) and raises `UnparsableJSON` -- a `ValueError` with a message that says what was wrong and where --
for a bound exceeded or for text that is not JSON. It never raises anything else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JSONBounds:
    """What one document may hold. `max_number_chars` bounds a run of digits outside strings (an integer,
    or a fraction's digits); Python refuses integers over 4,300 digits on its own, as a ValueError."""

    max_chars: int = 1 << 20
    max_depth: int = 64
    max_number_chars: int = 400


# A tool call's JSON (the model's text): small and shallow.
TOOL_CALL = JSONBounds(max_chars=1 << 20, max_depth=32, max_number_chars=400)
# An HTTP request body (a chat history with tool schemas): larger, still bounded.
REQUEST_BODY = JSONBounds(max_chars=64 << 20, max_depth=64, max_number_chars=400)


class UnparsableJSON(ValueError):
    """Text that is not JSON within the bounds; the message says which bound or where the syntax broke."""


# A string (an unterminated one runs to the end, so no start is scanned twice), a bracket, a digit run.
_TOKENS = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[\]{}]|[0-9]+', re.DOTALL)


def check(text: str, bounds: JSONBounds) -> None:
    """UnparsableJSON when `text` exceeds a bound; one pass, strings skipped."""
    if len(text) > bounds.max_chars:
        raise UnparsableJSON(f"{len(text)} characters, over the limit of {bounds.max_chars}")
    depth = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        first = token[0]
        if first in "[{":
            depth += 1
            if depth > bounds.max_depth:
                raise UnparsableJSON(f"nested more than {bounds.max_depth} levels deep (at char {m.start()})")
        elif first in "]}":
            depth -= 1
        elif first != '"' and len(token) > bounds.max_number_chars:
            raise UnparsableJSON(
                f"a number of {len(token)} digits at char {m.start()}, over the limit of "
                f"{bounds.max_number_chars} digits"
            )


def loads(data: str | bytes | bytearray, bounds: JSONBounds = TOOL_CALL) -> Any:
    """The JSON value of `data` (bytes are UTF-8), or UnparsableJSON; never any other exception."""
    if isinstance(data, (bytes, bytearray)):
        if len(data) > 4 * bounds.max_chars:  # no decoding of what cannot fit
            raise UnparsableJSON(f"{len(data)} bytes, over the limit of {bounds.max_chars} characters")
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise UnparsableJSON(f"not UTF-8 ({exc.reason} at byte {exc.start})") from exc
    else:
        text = data
    check(text, bounds)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnparsableJSON(f"not valid JSON: {exc.msg} (char {exc.pos})") from exc
    except (ValueError, RecursionError) as exc:  # not reached within the bounds; kept total regardless
        raise UnparsableJSON(f"not parsable JSON ({type(exc).__name__}: {exc})") from exc
