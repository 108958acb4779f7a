"""The checker/worker wire format: exact builtin data round-trips; anything else, and any malformed
input, is a WireError (the decoder is the trust boundary: it reads what a submission wrote)."""

from __future__ import annotations

import math
import os
import random

import pytest

from trialground.verify.sandboxed.wire import (
    MAX_DEPTH,
    NotPlainData,
    WireError,
    decode,
    encode,
    recv_frame,
    send_frame,
)

VALUES = [
    None, True, False, 0, -1, 2**300, -(2**63), 1.5, -0.0, math.inf, -math.inf, 1e-310, 3 + 4j, "",
    "héllo \udc80 \U0001f600", b"", b"\x00\xff", [], (), set(), frozenset(), {},
    [1, [2, (3, {4: frozenset({5})})]], {(1, "a"): [None, {b"k": 1.0}]}, {1, 2.5, "x", (1, 2)},
]  # fmt: skip


# ids by position: a set's repr depends on string hashing, which differs between processes (and so between
# pytest-xdist workers, which must collect the same ids)
@pytest.mark.parametrize("value", VALUES, ids=[f"value{i}" for i in range(len(VALUES))])
def test_plain_data_round_trips_with_exact_types(value: object) -> None:
    assert canonical(decode(encode(value))) == canonical(value)


def canonical(v: object) -> str:
    """Exact types and values at every level (repr tells -0.0 from 0.0); sets and dicts in a fixed order,
    since their iteration order depends on string hashing, which differs between processes."""
    if isinstance(v, set | frozenset):
        inner = ",".join(sorted(canonical(e) for e in v))
    elif isinstance(v, dict):
        inner = ",".join(sorted(f"{canonical(k)}:{canonical(x)}" for k, x in v.items()))
    elif isinstance(v, list | tuple):
        inner = ",".join(canonical(e) for e in v)
    else:
        inner = repr(v)
    return f"{type(v).__name__}({inner})"


def test_nan_round_trips() -> None:
    assert math.isnan(decode(encode(math.nan)))


class _Int(int):
    pass


class _Eq:
    def __eq__(self, other: object) -> bool:
        return True


@pytest.mark.parametrize("value", [_Int(1), _Eq(), [_Int(2)], {"k": _Eq()}, (1, type), print, range(3)])
def test_anything_but_exact_builtin_data_is_refused(value: object) -> None:
    with pytest.raises(NotPlainData):
        encode(value)


def test_depth_and_size_are_bounded() -> None:
    deep: object = 1
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    with pytest.raises(WireError):
        encode(deep)
    with pytest.raises(WireError):
        encode("x" * 2000, limit=1000)
    nested = b"l\x01\x00\x00\x00" * (MAX_DEPTH + 5) + b"N"
    with pytest.raises(WireError):
        decode(nested)


@pytest.mark.parametrize(
    "data",
    [b"", b"x", b"NN", b"i\xff\xff\xff\xff", b"s\x05\x00\x00\x00ab", b"l\xff\xff\xff\x7fN",
     b"S\x01\x00\x00\x00l\x00\x00\x00\x00", b"d\x01\x00\x00\x00l\x00\x00\x00\x00N", b"f\x03zzz",
     b"s\x01\x00\x00\x00\xff"],
)  # fmt: skip
def test_malformed_input_is_a_wire_error(data: bytes) -> None:
    with pytest.raises(WireError):
        decode(data)


def test_random_bytes_never_raise_anything_else() -> None:
    rng = random.Random(15)
    seeds = [encode(v) for v in VALUES]
    for _ in range(20_000):
        data = bytearray(rng.choice(seeds) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 40)))
        for _ in range(rng.randint(0, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        try:  # noqa: SIM105 - the point: nothing but WireError escapes
            decode(bytes(data))
        except WireError:
            pass


def test_frames_refuse_oversized_lengths_before_reading() -> None:
    r, w = os.pipe()
    try:
        send_frame(w, encode([1, 2]), os.write)
        assert decode(recv_frame(r, os.read)) == [1, 2]
        os.write(w, (1 << 31).to_bytes(4, "little"))
        with pytest.raises(WireError):
            recv_frame(r, os.read, limit=1 << 20)
        os.close(w)
        w = -1
        with pytest.raises(EOFError):
            recv_frame(r, os.read)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
