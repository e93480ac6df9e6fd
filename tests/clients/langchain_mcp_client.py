"""A real MCP client this repository did not write: LangChain's `langchain-mcp-adapters`, on two served knowledge bases.

Run with the clients' own interpreter (`.venv-clients`, made by `scripts/setup.sh test`: that package needs `mcp<2`,
the project `mcp==2.3.0`):

    .venv-clients/bin/python tests/clients/langchain_mcp_client.py URL_A URL_B [BEARER_TOKEN]

It connects to both servers at once (`MultiServerMCPClient`), lists their tools, calls each tool of the first one as
an agent would (facets, a filtered lookup, a budgeted lookup paged with its cursor, a read from a citation, a document
read) and prints one JSON object: the
tool names and descriptions per server, and what each call returned.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from langchain_mcp_adapters.client import MultiServerMCPClient


def _json(output: Any) -> Any:
    """A tool's output as the JSON text it carries (a string, or content blocks holding it)."""
    if isinstance(output, tuple):  # content and artifact
        output = output[0]
    if isinstance(output, list):
        output = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in output)
    return json.loads(output)


async def main(url_a: str, url_b: str, token: str | None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    servers: dict[str, Any] = {
        name: {"url": url, "transport": "streamable_http", **({"headers": headers} if headers else {})}
        for name, url in (("a", url_a), ("b", url_b))
    }
    client = MultiServerMCPClient(servers)
    listed = {name: await client.get_tools(server_name=name) for name in servers}
    tools = {tool.name: tool for tool in listed["a"]}
    lookup = next(t for t in listed["a"] if t.name.startswith("lookup_"))
    facets = _json(await tools["list_facets"].ainvoke({}))
    category = facets["categories"][0]["value"]
    found = _json(await lookup.ainvoke({"query": "退款多久到账", "filters": {"category": category}}))
    anywhere = _json(await lookup.ainvoke({"query": "退款多久到账"}))
    pages = [_json(await lookup.ainvoke({"query": "退款多久到账", "max_chars": 200}))]
    while pages[-1]["cursor"] and len(pages) < 10:
        pages.append(
            _json(await lookup.ainvoke({"query": "退款多久到账", "max_chars": 200, "cursor": pages[-1]["cursor"]}))
        )
    citation = anywhere["evidenceBlocks"][0]["citation"]
    read = _json(await tools["read_evidence"].ainvoke({"citation": citation, "after": 1}))
    document = _json(await tools["read_document"].ainvoke({"source": anywhere["evidenceBlocks"][0]["source"]}))
    return {
        "servers": {
            name: [{"name": t.name, "description": t.description} for t in server_tools]
            for name, server_tools in listed.items()
        },
        "facets": facets,
        "filtered": found,
        "lookup": anywhere,
        "pages": pages,
        "read_evidence": read,
        "read_document": document,
    }


if __name__ == "__main__":
    arguments = sys.argv[1:]
    print(json.dumps(asyncio.run(main(arguments[0], arguments[1], arguments[2] if len(arguments) > 2 else None))))
