"""`plainjson.loads` is total: every input is a value or an `UnparsableJSON` saying why."""

from __future__ import annotations

import json

import pytest

from trialground import plainjson
from trialground.plainjson import JSONBounds, UnparsableJSON


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("9" * 5000, "digits"),
        ("[" * 5000 + "]" * 5000, "nested"),
        ('{"a": ' * 5000 + "1" + "}" * 5000, "nested"),
        ("[1, 2", "not valid JSON"),
        ('"' + '\\"' * 200_000, "not valid JSON"),  # many escaped quotes, never closed: still one pass
        ('"abc\\', "not valid JSON"),
        ("x" * 100, "not valid JSON"),
    ],
)
def test_hostile_text_is_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(UnparsableJSON, match=reason):
        plainjson.loads(text)


def test_brackets_and_digits_inside_strings_do_not_count() -> None:
    value = {"s": "[" * 10_000 + "9" * 10_000, "n": -1.5e300, "deep": [[[[1]]]]}
    assert plainjson.loads(json.dumps(value)) == value


def test_bytes_and_bounds() -> None:
    assert plainjson.loads(b'{"a": [1]}') == {"a": [1]}
    with pytest.raises(UnparsableJSON, match="UTF-8"):
        plainjson.loads(b'"\xff"')
    with pytest.raises(UnparsableJSON, match="characters"):
        plainjson.loads("[" + "1," * 50 + "1]", JSONBounds(max_chars=20))
    assert plainjson.loads("[[1]]", JSONBounds(max_depth=2)) == [[1]]
    with pytest.raises(UnparsableJSON, match="nested"):
        plainjson.loads("[[[1]]]", JSONBounds(max_depth=2))
