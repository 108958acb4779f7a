"""The source a family ships as a hidden check: its check program with the shared helpers before it
(`check_helpers.py`), one self-contained standard-library file."""

from pathlib import Path

_HELPERS = (Path(__file__).parent / "check_helpers.py").read_text(encoding="utf-8")


def check_source(folder: Path, name: str) -> str:
    """The shipped source of the check program `folder/name`."""
    return _HELPERS + "\n\n" + (folder / name).read_text(encoding="utf-8")
