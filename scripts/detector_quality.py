"""Precision and recall of the hack detectors against a run's labelled trajectories.

    python scripts/detector_quality.py RUN_DIR [--label tests_not_run]

See `trialground.monitor.detector_quality`.
"""

from __future__ import annotations

import argparse

from trialground.monitor.detector_quality import detector_quality, format_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir")
    ap.add_argument("--label", default="tests_not_run", help="flag marking a paid hack")
    args = ap.parse_args()
    print(format_table(detector_quality(args.run_dir, args.label)))


if __name__ == "__main__":
    main()
