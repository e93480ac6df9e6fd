"""Optional OpenTelemetry spans of each lookup and its components, through Haystack's tracing.

Off by default. `enable_spans()` (or `LOOKUP_KNOWLEDGE_SPANS=1` for the CLI, the MCP server and `load_pipeline`)
hands Haystack an OpenTelemetry tracer (`opentelemetry-haystack`, the `otel` extra): every `lookup` is then a
`lookup_knowledge` span, tagged with the trace row id (`lookup_knowledge.trace_id`) and status, around Haystack's
`haystack.pipeline.run` and one `haystack.component.run` span per component. Where the spans go (OTLP, console) is
the operator's OpenTelemetry SDK configuration; query and document content stay out of the spans unless Haystack's
`HAYSTACK_CONTENT_TRACING_ENABLED` says otherwise.
"""

from __future__ import annotations

from typing import Any

from haystack import tracing

from components.core.environment import SPANS

SPANS_ENV = SPANS.name
TRACER_NAME = "lookup_knowledge"


def enable_spans(tracer_provider: Any = None) -> None:
    """
    Send Haystack's spans of every lookup to OpenTelemetry.

    :param tracer_provider: An OpenTelemetry `TracerProvider` (default: the global one the SDK configured).
    :raises ImportError: If the `otel` extra (`opentelemetry-haystack`) is not installed, with the fix.
    """
    try:
        from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer
        from opentelemetry import trace
    except ImportError as err:
        msg = "spans need the otel extra: pip install 'lookup-knowledge[otel]'"
        raise ImportError(msg) from err
    provider = tracer_provider or trace.get_tracer_provider()
    tracing.enable_tracing(OpenTelemetryTracer(provider.get_tracer(TRACER_NAME)))


def disable_spans() -> None:
    """Stop sending spans."""
    tracing.disable_tracing()


def enable_spans_from_env() -> bool:
    """
    Enable spans when `LOOKUP_KNOWLEDGE_SPANS` is `1`/`true`.

    :returns: Whether spans are on.
    """
    if (SPANS.read() or "").strip().lower() in ("1", "true", "yes"):
        enable_spans()
        return True
    return False
