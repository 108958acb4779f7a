"""The race-free host-side primitives on plain host directories: path normalisation, both resolvers,
symlinks anywhere in a path, special files, and tree walks that hold few descriptors and no recursion."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from trialground.errors import SandboxError
from trialground.sandbox import beneath


@pytest.fixture(params=["openat2", "walk"], autouse=True)
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(beneath, "OPENAT2", None if request.param == "openat2" else False)
    return request.param


@pytest.mark.parametrize(
    ("path", "want"),
    [
        ("a/b", ("a", "b")),
        ("/workspace/a//./b/", ("a", "b")),
        ("/workspace", ()),
        ("a/../b", ("b",)),
        ("a/b/../../c", ("c",)),
    ],
)
def test_parts_normalises(path: str, want: tuple[str, ...]) -> None:
    assert beneath.parts(path) == want


@pytest.mark.parametrize(
    "path", ["../x", "a/../../x", "/etc/passwd", "/workspacex/a", "/workspace/../x", "a\x00b"]
)
def test_parts_refuses_escapes(path: str) -> None:
    with pytest.raises(SandboxError) as info:
        beneath.parts(path)
    assert info.value.kind == "bad_path"


def test_symlink_anywhere_in_a_path_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f").write_text("inside")
    outside.mkdir()
    (outside / "f").write_text("secret")
    (root / "up").symlink_to(outside)
    (root / "rel").symlink_to("real")  # even one that stays inside: no symlink is ever followed
    (root / "real" / "back").symlink_to("..")
    for path in ("up/f", "rel/f", "real/back/real/f", "up/new/f"):
        with pytest.raises(SandboxError) as info:
            beneath.read_file(root, path)
        assert info.value.kind == "bad_path" and "symlink" in str(info.value)
        with pytest.raises(SandboxError):
            beneath.write_file(root, path, b"x")
    assert sorted(os.listdir(outside)) == ["f"] and (outside / "f").read_text() == "secret"
    assert beneath.read_file(root, "real/f") == b"inside"


def test_write_makes_parents_and_read_caps_size(tmp_path: Path) -> None:
    beneath.write_file(tmp_path, "a/b/c", b"12345")
    assert (tmp_path / "a" / "b" / "c").read_bytes() == b"12345"
    beneath.write_file(tmp_path, "a/b/c", b"9")  # overwrite truncates
    assert beneath.read_file(tmp_path, "a/b/c") == b"9"
    assert beneath.read_file(tmp_path, "a/b/c", limit=1) == b"9"
    beneath.write_file(tmp_path, "big", b"x" * 10)
    with pytest.raises(SandboxError) as info:
        beneath.read_file(tmp_path, "big", limit=9)
    assert info.value.kind == "too_large"
    with pytest.raises(FileNotFoundError):
        beneath.read_file(tmp_path, "a/missing")
    with pytest.raises(SandboxError) as info:
        beneath.write_file(tmp_path, "a/b/c/d", b"x")  # a parent is a file
    assert info.value.kind == "bad_path"


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "p")
    for op in (lambda: beneath.read_file(tmp_path, "p"), lambda: beneath.write_file(tmp_path, "p", b"x")):
        with pytest.raises(SandboxError) as info:
            op()
        assert info.value.kind == "not_a_file"


def _deep(root: Path, depth: int) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    with open(os.open("leaf", os.O_WRONLY | os.O_CREAT, 0o640, dir_fd=fd), "w") as f:
        f.write("bottom")
    os.close(fd)


def test_copy_keeps_metadata_links_and_fifos_and_follows_nothing(tmp_path: Path) -> None:
    src, dst, outside = tmp_path / "src", tmp_path / "dst", tmp_path / "outside"
    for d in (src, dst, outside):
        d.mkdir()
    (outside / "secret").write_text("secret")
    (src / "sub").mkdir(mode=0o750)
    (src / "sub" / "f").write_bytes(b"data")
    os.chmod(src / "sub" / "f", 0o604)
    os.utime(src / "sub" / "f", ns=(1_000_000_000, 2_000_000_000))
    (src / "out").symlink_to(outside)
    os.mkfifo(src / "sub" / "p", 0o620)
    s, d = beneath.open_root(src), beneath.open_root(dst)
    try:
        beneath.copy_tree(s, d)
    finally:
        os.close(s)
        os.close(d)
    f = os.lstat(dst / "sub" / "f")
    assert (dst / "sub" / "f").read_bytes() == b"data" and stat.S_IMODE(f.st_mode) == 0o604
    assert f.st_mtime_ns == 2_000_000_000
    assert stat.S_IMODE(os.lstat(dst / "sub").st_mode) == 0o750
    assert os.readlink(dst / "out") == str(outside)
    assert stat.S_ISFIFO(os.lstat(dst / "sub" / "p").st_mode)
    fd = beneath.open_root(dst)
    try:
        beneath.clear_tree(fd)
    finally:
        os.close(fd)
    assert (
        os.listdir(dst) == [] and (outside / "secret").read_text() == "secret"
    )  # the link went, not its target


# Run in a child with few descriptors and a low recursion limit: any per-level descriptor leak or
# recursion fails it.
CHILD = """
import os, resource, sys
from pathlib import Path
from trialground.sandbox import beneath
resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))  # 2 x WINDOW + a few; the tree needs 2,800
sys.setrecursionlimit(150)
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
s, d = beneath.open_root(src), beneath.open_root(dst)
beneath.copy_tree(s, d)
p = dst
for _ in range(int(sys.argv[3])):
    p = p / "d"
fd = beneath.open_root(p)  # the path is long but fine for one open
assert os.read(os.open("leaf", os.O_RDONLY, dir_fd=fd), 100) == b"bottom"
os.close(fd)
beneath.clear_tree(s)
beneath.remove_tree(dst)
print("ok", os.listdir(src), dst.exists())
"""


def test_deep_trees_copy_and_clear_without_recursion_or_descriptor_growth(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    depth = 1400
    _deep(src, depth)
    r = subprocess.run(
        [sys.executable, "-c", CHILD, str(src), str(dst), str(depth)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0 and r.stdout.split() == ["ok", "[]", "False"], r.stderr[-2000:]
