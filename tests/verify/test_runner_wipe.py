"""The sandbox reset's wipe (`sandbox/backends/bwrap/reset.py`, which the grading runner and the
supervisor run; here on a temporary directory): any depth, no recursion, never through a link,
directories made unreadable opened up again, and a plain False when it cannot finish."""

from __future__ import annotations

import os
from pathlib import Path

from trialground.sandbox.backends.bwrap.reset import wipe


def test_deep_locked_trees_are_wiped_and_links_not_followed(tmp_path: Path) -> None:
    top, outside = tmp_path / "top", tmp_path / "outside"
    top.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(3000):  # far past the recursion limit, and past PATH_MAX as one path
            os.mkdir("d" * 20, dir_fd=fd)
            nxt = os.open("d" * 20, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        os.symlink(str(outside), "link", dir_fd=fd)
        os.mkfifo("fifo", dir_fd=fd)
        os.close(os.open("file", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        os.fchmod(fd, 0)  # the deepest directory made unreadable
    finally:
        os.close(fd)
    (top / "locked").mkdir()
    (top / "locked" / "inner").mkdir()
    (top / "locked" / "inner" / "x").write_text("x")
    os.chmod(top / "locked" / "inner", 0)
    os.chmod(top / "locked", 0)
    os.symlink(str(outside), top / "top-link")
    assert wipe(str(top)) is True
    assert os.listdir(top) == []
    assert (outside / "keep.txt").read_text() == "keep"  # reached only through links: untouched


def test_a_top_that_is_a_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep").write_text("k")
    os.symlink(tmp_path / "real", tmp_path / "link")
    assert wipe(str(tmp_path / "link")) is False
    assert (tmp_path / "real" / "keep").exists()
