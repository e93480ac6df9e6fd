"""The pipelines and the service around them; `from pipelines import lookup` is the Python entry point.

- `pipelines/*.py`: the library: loading the YAML (`loading`, `pipeline_file`), the deployment's settings, indexing
  (`indexing`), the lookup calls (`api`) and the one service every entry point calls (`service`).
- `pipelines/entrypoints/`: the command line, the MCP server, the REST routes (with Dify's contract), the Agent
  tool, trace browsing. They import the service and the settings, never a pipeline node or a store.
- `pipelines/measure/`: eval, bench and the scale corpus, which measure the pipelines and may read the store.

Each name below is imported on first use (`from pipelines import lookup` loads `pipelines.api`, and Haystack with
it), so that `import pipelines.entrypoints.cli` is light and the command line decides how the process starts
(`pipelines.startup`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import components  # noqa: F401 - first: it switches Haystack's telemetry off before Haystack is imported

if TYPE_CHECKING:
    from pipelines.api import load_pipeline, lookup, lookup_inputs, lookup_with_details
    from pipelines.entrypoints.agent_tool import lookup_knowledge_tool

__all__ = ["load_pipeline", "lookup", "lookup_inputs", "lookup_knowledge_tool", "lookup_with_details"]

# the agent tool pulls in Haystack's tool machinery: it loads only when someone asks for it
_MODULE_OF = {
    "load_pipeline": "pipelines.api",
    "lookup": "pipelines.api",
    "lookup_inputs": "pipelines.api",
    "lookup_with_details": "pipelines.api",
    "lookup_knowledge_tool": "pipelines.entrypoints.agent_tool",
}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value
