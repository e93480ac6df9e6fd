"""`lookup_knowledge` as a hayhooks pipeline: `POST /lookup_knowledge/run` `{query, session_id?, filters?, max_chars?,
cursor?}` → `{"result": ...}`.

```bash
HAYSTACK_TELEMETRY_ENABLED=False HAYHOOKS_TRACING_ENABLED=false LOOKUP_KNOWLEDGE_DATA_DIR=data \
    hayhooks run --host 127.0.0.1 --port 1416 --pipelines-dir hayhooks
curl -s -X POST http://127.0.0.1:1416/lookup_knowledge/run -H 'Content-Type: application/json' \
    -d '{"query": "disk full on a node", "session_id": "chat-42"}'
```

`setup()` loads `pipelines.yaml` (or `LOOKUP_KNOWLEDGE_PIPELINE`) as a `KnowledgeService` (`pipelines.service`), on
the data of `LOOKUP_KNOWLEDGE_DATA_DIR` (else `./data`) with `MILVUS_URI` and `TRACE_DB_URL` as everywhere;
`run_api` returns the full `LookupResult` JSON as hayhooks' `result`, and every call is one trace row, a rejected or
failed lookup included (it is a result with `evidenceStatus` `invalid_query` or `error`, HTTP 200). Calls run
concurrently (hayhooks runs `run_api` in a thread pool), as through the agent tool and the MCP server; calls of one
session one after another.
"""

from __future__ import annotations

from typing import Any

from components.core.environment import PIPELINE, TELEMETRY
from hayhooks import BasePipelineWrapper
from pipelines.service import KnowledgeService
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE

#: Another lookup pipeline YAML than the repository's `pipelines.yaml`.
PIPELINE_ENV = PIPELINE.name


def _telemetry_off() -> None:
    """Haystack was imported by hayhooks before `components` could set its switch: turn telemetry off here too."""
    if (TELEMETRY.read() or "").lower() not in ("true", "1"):
        from haystack.telemetry import _telemetry

        _telemetry.telemetry = None


class PipelineWrapper(BasePipelineWrapper):
    """The lookup pipeline behind hayhooks' `/lookup_knowledge/run` (and its MCP tool listing)."""

    def setup(self) -> None:
        """Load the lookup pipeline once (warmed up)."""
        _telemetry_off()
        self.service = KnowledgeService.load(PIPELINE.read() or DEFAULT_LOOKUP_PIPELINE)
        self.pipeline = self.service.pipeline

    def run_api(
        self,
        query: str,
        session_id: str | None = None,
        filters: dict[str, str | list[str]] | None = None,
        max_chars: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """
        Look up the knowledge base and get back evidence, not an answer (found=false means "no knowledge", never a
        fact).

        :param query: The question or its key terms, in the user's language (1 to 2,000 characters).
        :param session_id: A stable id for the conversation: evidence already returned in it is not repeated.
        :param filters: Search only documents matching all of these, strictly: category, tags, source, source_prefix,
            updated_after and the declared fields.
        :param max_chars: The most characters of evidence to return.
        :param cursor: A previous result's `cursor`: the next blocks of that lookup.
        :returns: The LookupResult JSON: found, evidenceStatus, evidenceBlocks (each with its citation),
            moreAvailable, cursor, traceId, ...
        """
        return self.service.lookup(query, session_id=session_id, filters=filters, max_chars=max_chars, cursor=cursor)
