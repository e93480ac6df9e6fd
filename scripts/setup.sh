#!/usr/bin/env bash
# Create .venv (if missing) and install the project into it. Usage: scripts/setup.sh [EXTRAS]
# pip's output is kept in .venv/pip.log and shown only when the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
target="."
if [ -n "${1:-}" ]; then
  target=".[${1}]"
fi
echo "Installing the project into .venv (first run: about a minute) ..."
if ! .venv/bin/python -m pip install --quiet --disable-pip-version-check -e "$target" > .venv/pip.log 2>&1; then
  cat .venv/pip.log >&2
  echo "setup failed: pip could not install the project (log above, also in .venv/pip.log)" >&2
  exit 1
fi
if [ "${1:-}" = "test" ]; then
  # real MCP clients for the tests, in an environment of their own (they need another mcp release than the project)
  if [ ! -x .venv-clients/bin/python ]; then
    "$PYTHON" -m venv .venv-clients
  fi
  if ! .venv-clients/bin/python -m pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt \
      > .venv-clients/pip.log 2>&1; then
    cat .venv-clients/pip.log >&2
    echo "setup failed: pip could not install the MCP clients for the tests (log above)" >&2
    exit 1
  fi
fi
