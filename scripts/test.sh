#!/usr/bin/env bash
# One command from a fresh clone: set up with the test extras, lint, type-check and run the whole test suite,
# including the tiers that start a real Milvus server and a real PostgreSQL server on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# pytest exits 5 when it collects nothing; `set -e` turns that (and any failure) into a failed run.
.venv/bin/python -m pytest "$@"
