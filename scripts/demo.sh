#!/usr/bin/env bash
# One command from a fresh clone: set up, index knowledge/ into the embedded Milvus Lite store, run sample lookups.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/lookup-knowledge index --knowledge knowledge
if .venv/bin/lookup-knowledge --help | grep -q " ask "; then
  # the last one has no answer in knowledge/: it comes back found=False, status no_evidence
  for q in "磁盘满了怎么办" "a customer was charged twice for one order" "how long do refunds take?" \
    "公司年假怎么申请，需要谁审批"; do
    echo
    echo "=== lookup_knowledge: $q"
    .venv/bin/lookup-knowledge ask "$q"
  done
fi
