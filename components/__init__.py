"""The lookup_knowledge tool's Haystack components (pipeline nodes), and the plumbing they share.

- `components/*.py`: one pipeline node per module, named after its class (what `pipelines.yaml` and
  `pipelines/indexing.yaml` wire together).
- `components/store/`: the knowledge collection in Milvus and the knowledge index file (what indexing writes and
  lookups read).
- `components/trace/`: the `tool_invocation` table and its store (the trace, and the session memory).
- `components/core/`: what every layer shares and none owns: the result contract, the similarity scale and
  identities, hint-term matching, the offline embedding models.
"""

import os

# The one place the telemetry switch is set: Haystack reads it when it is first imported, and everything of this
# project imports this package first. No network at run time (telemetry would try to phone home); an operator who
# wants it sets HAYSTACK_TELEMETRY_ENABLED=True.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
