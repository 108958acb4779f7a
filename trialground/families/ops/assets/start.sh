#!/usr/bin/env bash
# Start the service with the settings in .env.
set -euo pipefail
cd "$(dirname "$0")"

set -a
# shellcheck disable=SC1091
source ./.env
set +a

exec python3 service.py
