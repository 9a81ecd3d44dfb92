#!/usr/bin/env bash
# The GPU device check (see scripts/device_check.py): writes $OUT/device_check.json and prints it.
# Usage: OUT=/some/dir scripts/device_check.sh [--allow-cpu] [--tiny] [--only SECTION ...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" scripts/device_check.py "$@"
