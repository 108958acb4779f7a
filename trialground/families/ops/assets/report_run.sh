#!/usr/bin/env bash
# Summarise the logs: writes out/report.txt with one line `__METRIC__=<value>`.
set -euo pipefail

LOG_DIR="logs"
OUT_DIR="out"

mkdir -p "$OUT_DIR"
value=$(__PIPELINE__)
echo "__METRIC__=$((value))" > "$OUT_DIR/report.txt"
echo "report written: $(cat "$OUT_DIR/report.txt")"
