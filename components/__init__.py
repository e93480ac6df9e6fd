"""The lookup_knowledge tool's Haystack components (pipeline nodes), grouped by kind as Haystack groups its own.

One node per module, named after its class; the folders say what a node does, and what it may import:

- `converters/`, `preprocessors/`, `embedders/`, `writers/`: the indexing nodes (`pipelines/indexing.yaml`).
- `query/`, `retrievers/`, `rankers/`, `evidence/`: the lookup nodes (`pipelines.yaml`), in the order a query meets
  them: understanding the query, reading the store, ranking, deciding what is evidence and packing it.
- `trace/`: the trace recorder node and the `tool_invocation` table and store behind it (the trace, and session
  memory).
- `store/`: the knowledge store (the Milvus collection and the knowledge index file): what indexing writes and
  lookups read. Not a node.
- `core/`: what every layer shares and none owns: the result contract, the similarity scale and identities,
  hint-term matching, the offline embedding models.

A node imports `core/` and `store/` (and `trace/`'s store), never another node.
"""

from components.core.environment import TELEMETRY

# The one place the telemetry switch is set: Haystack reads it when it is first imported, and everything of this
# project imports this package first. No network at run time (telemetry would try to phone home); an operator who
# wants it sets HAYSTACK_TELEMETRY_ENABLED=True.
TELEMETRY.set_default("False")
