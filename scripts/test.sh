#!/usr/bin/env bash
# One command from a fresh clone: set up with the test extras, lint, type-check and run the whole test suite,
# including the tiers that start a real Milvus server and a real PostgreSQL server on 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Two worker processes, each given whole modules (a module's fixtures and servers stay in one process): the serial
# run kept 1.1 of this machine's 2 cores busy. `-n 0` in the arguments runs it serially.
# pytest exits 5 when it collects nothing; `set -e` turns that (and any failure) into a failed run.
.venv/bin/python -m pytest -n 2 --dist loadfile "$@"
