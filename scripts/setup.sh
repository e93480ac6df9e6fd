#!/usr/bin/env bash
# Create .venv (if missing) and install the project into it. Usage: scripts/setup.sh [EXTRAS]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
extras="${1:-}"
if [ -n "$extras" ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[${extras}]"
else
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
fi
