"""A `POST /lookup` on a served tool that is still starting: what the multi-process tests ask it."""

from __future__ import annotations

import time

import httpx


def post_lookup(port: int, query: str, timeout: float = 120) -> dict:
    """POST /lookup on a served tool on 127.0.0.1, waiting up to `timeout` seconds for it to listen first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.post(f"http://127.0.0.1:{port}/lookup", json={"query": query}, timeout=60)
            response.raise_for_status()
            return response.json()
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the server did not answer"
            time.sleep(0.2)
