"""Helpers shared by the monitor tests."""

from __future__ import annotations

from pathlib import Path

from trialground.monitor import Alert, Monitor, MonitorConfig
from trialground.monitor.synthetic import Fault, synthetic_run


def run_synthetic(tmp: Path, seed: int, fault: Fault | None, steps: int = 200, **kw: object) -> list[Alert]:
    """Feed a synthetic run through a real Monitor; return every alert raised."""
    alerts: list[Alert] = []
    with Monitor(tmp, MonitorConfig(sinks=(), console=False)) as mon:
        for step, metrics in synthetic_run(seed, steps, fault=fault, **kw):  # type: ignore[arg-type]
            alerts += mon.observe(step, metrics)
    return alerts


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(url: str, png: Path, size: tuple[int, int] = (1280, 2400), wait_ms: int = 0) -> Path:
    """Render `url` in headless Chromium into `png`. `wait_ms` lets page scripts run (virtual time)."""
    import subprocess
    import tempfile

    exe = chromium()
    assert exe is not None
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--screenshot={png}",
            f"--window-size={size[0]},{size[1]}",
        ]
        if wait_ms:
            cmd.append(f"--virtual-time-budget={wait_ms}")
        proc = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=120)
    assert png.is_file(), f"chromium wrote no screenshot (exit {proc.returncode}): {proc.stderr[-2000:]}"
    return png


def dump_dom(url: str, wait_ms: int = 3000) -> str:
    """The DOM after `wait_ms` of virtual time: proves page scripts ran in a real browser."""
    import subprocess
    import tempfile

    exe = chromium()
    assert exe is not None
    with tempfile.TemporaryDirectory() as profile:
        cmd = [
            exe,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={wait_ms}",
            "--dump-dom",
        ]
        proc = subprocess.run([*cmd, url], capture_output=True, text=True, timeout=120)
    return proc.stdout


def pixel_stats(png: Path) -> tuple[float, int]:
    """(grey-level variance, number of distinct colours) of a PNG: a blank page has ~0 and 1."""
    import pytest

    image = pytest.importorskip("PIL.Image", reason="Pillow is needed to read the screenshot")
    img = image.open(png).convert("RGB")
    hist = img.convert("L").histogram()
    n = sum(hist)
    mean = sum(i * h for i, h in enumerate(hist)) / n
    var = sum(h * (i - mean) ** 2 for i, h in enumerate(hist)) / n
    colours = img.getcolors(maxcolors=1 << 20)
    return var, len(colours) if colours else 1 << 20
