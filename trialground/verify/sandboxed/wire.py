"""Plain-data wire format between the grading *checker* and the *submission worker* (see `runner.py`).

Standard library only, no imports at all: the runner ships this file as a code object into the grading
sandbox, and the host imports it only for tests. Contract:

- `encode(value)` accepts exact builtin data types only (`None`, `bool`, `int`, `float`, `complex`,
  `str`, `bytes`, `list`, `tuple`, `dict`, `set`, `frozenset`; subclasses are refused), at most
  `MAX_DEPTH` containers deep and `MAX_BYTES` encoded; other types raise `NotPlainData`, size and depth
  `WireError`. It never calls a
  method that a subclass or a custom object could override, so it cannot run foreign code.
- `decode(data)` is the trust boundary: `data` may be anything the submission wrote. It builds fresh
  builtin objects only, checks every length against the buffer, limits depth, node count and size, and
  raises `WireError` on any malformed, truncated or trailing input (never another exception, never a
  hang). Building a set or dict only hashes values it just built itself (builtin types, builtin hashes).
- `send_frame` / `recv_frame`: a 4-byte little-endian length, then the payload; `recv_frame` refuses a
  length above its limit before reading the payload, so a flood costs the reader nothing.
"""

MAX_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 100
MAX_NODES = 2_000_000


class WireError(ValueError):
    """A value that cannot be sent (too large, too deep), or bytes that are not a well-formed encoding."""


class NotPlainData(WireError):
    """A value of a type that is not exactly one of the builtin data types."""


_SEQ_TAGS: dict = {list: b"l", tuple: b"t", set: b"S", frozenset: b"Z"}


def encode(value, limit=MAX_BYTES):
    """`value` as bytes; raises WireError for non-plain data, too deep nesting or more than `limit`."""
    out = []
    size = [0]

    def add(chunk):
        size[0] += len(chunk)
        if size[0] > limit:
            raise WireError(f"the value is larger than {limit} bytes encoded")
        out.append(chunk)

    def put(v, depth):
        t = type(v)
        if v is None:
            add(b"N")
        elif t is bool:
            add(b"T" if v else b"F")
        elif t is int:
            n = (int.bit_length(v) + 8) // 8
            if n > limit:
                raise WireError(f"the value is larger than {limit} bytes encoded")
            add(b"i" + n.to_bytes(4, "little") + int.to_bytes(v, n, "little", signed=True))
        elif t is float:
            h = float.hex(v).encode()
            add(b"f" + bytes((len(h),)) + h)
        elif t is complex:
            re, im = float.hex(v.real).encode(), float.hex(v.imag).encode()
            add(b"c" + bytes((len(re),)) + re + bytes((len(im),)) + im)
        elif t is str:
            b = str.encode(v, "utf-8", "surrogatepass")
            add(b"s" + len(b).to_bytes(4, "little"))
            add(b)
        elif t is bytes:
            add(b"b" + len(v).to_bytes(4, "little"))
            add(v)
        elif t in _SEQ_TAGS:
            if depth >= MAX_DEPTH:
                raise WireError(f"the value is nested more than {MAX_DEPTH} deep")
            items = list.copy(v) if t is list else tuple(v) if t is tuple else list(v)
            add(_SEQ_TAGS[t] + len(items).to_bytes(4, "little"))
            for x in items:
                put(x, depth + 1)
        elif t is dict:
            if depth >= MAX_DEPTH:
                raise WireError(f"the value is nested more than {MAX_DEPTH} deep")
            pairs = list(dict.items(v))
            add(b"d" + len(pairs).to_bytes(4, "little"))
            for k, x in pairs:
                put(k, depth + 1)
                put(x, depth + 1)
        else:
            raise NotPlainData(f"{t.__module__}.{t.__qualname__} is not plain data")

    put(value, 0)
    return b"".join(out)


def decode(data, limit=MAX_BYTES):
    """The value `data` encodes, built from fresh builtin objects; WireError for anything malformed."""
    if type(data) is not bytes:
        raise WireError("wire data must be bytes")
    if len(data) > limit:
        raise WireError(f"wire data is larger than {limit} bytes")
    end = len(data)
    pos = [0]
    nodes = [0]

    def take(n):
        p = pos[0]
        if n < 0 or p + n > end:
            raise WireError(f"truncated at byte {p}")
        pos[0] = p + n
        return data[p : p + n]

    def count():
        return int.from_bytes(take(4), "little")

    def hexfloat():
        text = take(take(1)[0])
        try:
            return float.fromhex(text.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            raise WireError(f"bad float before byte {pos[0]}") from None

    def get(depth):
        nodes[0] += 1
        if nodes[0] > MAX_NODES:
            raise WireError(f"more than {MAX_NODES} values")
        tag = take(1)
        if tag == b"N":
            return None
        if tag == b"T":
            return True
        if tag == b"F":
            return False
        if tag == b"i":
            return int.from_bytes(take(count()), "little", signed=True)
        if tag == b"f":
            return hexfloat()
        if tag == b"c":
            re = hexfloat()
            return complex(re, hexfloat())
        if tag == b"s":
            try:
                return take(count()).decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise WireError(f"bad text before byte {pos[0]}") from None
        if tag == b"b":
            return take(count())
        if tag in (b"l", b"t", b"S", b"Z", b"d"):
            if depth >= MAX_DEPTH:
                raise WireError(f"nested more than {MAX_DEPTH} deep")
            n = count()
            if n > end - pos[0]:  # every item takes at least one byte
                raise WireError(f"a container claims {n} items past the end")
            if tag == b"d":
                out = {}
                for _ in range(n):
                    k = get(depth + 1)
                    try:
                        out[k] = get(depth + 1)
                    except TypeError:
                        raise WireError("an unhashable dict key") from None
                return out
            items = [get(depth + 1) for _ in range(n)]
            if tag == b"l":
                return items
            if tag == b"t":
                return tuple(items)
            try:
                return set(items) if tag == b"S" else frozenset(items)
            except TypeError:
                raise WireError("an unhashable set item") from None
        raise WireError(f"unknown tag {tag!r} at byte {pos[0] - 1}")

    try:
        value = get(0)
    except RecursionError:
        raise WireError("nested too deeply") from None
    if pos[0] != end:
        raise WireError(f"{end - pos[0]} trailing bytes")
    return value


def send_frame(fd, payload, write):
    """Write one frame (length + payload) to `fd` with `write` (os.write, passed in: no imports here)."""
    data = len(payload).to_bytes(4, "little") + payload
    while data:
        data = data[write(fd, data) :]


def recv_frame(fd, read, limit=MAX_BYTES):
    """One frame's payload from `fd`; EOFError when the writer is gone, WireError when over `limit`."""

    def exact(n):
        chunks, got = [], 0
        while got < n:
            chunk = read(fd, min(n - got, 1 << 20))
            if not chunk:
                raise EOFError("the channel closed")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    n = int.from_bytes(exact(4), "little")
    if n > limit:
        raise WireError(f"a frame of {n} bytes (limit {limit})")
    return exact(n)
