"""The HTTP transport: loopback by default, a bearer token beyond it, DNS-rebinding protection always on."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from pipelines.entrypoints.cli import main
from pipelines.entrypoints.mcp_server import AUTH_ENV, build_server, check_bind, http_app

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _post(app, host: str, headers: dict[str, str] | None = None):
    with TestClient(app, base_url=f"http://{host}") as client:
        return client.post("/mcp", json=INITIALIZE, headers={**ACCEPT, **(headers or {})})


@pytest.fixture
def server():
    return build_server(tool=None)  # type: ignore[arg-type] - initialize and auth never reach the tool


class TestHttpSecurity:
    def test_loopback_without_a_token_serves(self, server):
        assert _post(http_app(server, "127.0.0.1"), "127.0.0.1:8765").status_code == 200

    @pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "10.0.0.5:8765"])
    def test_a_foreign_host_header_is_refused(self, server, host):
        response = _post(http_app(server, "127.0.0.1"), host)
        assert response.status_code in (400, 421), response.text

    def test_with_a_token_every_request_needs_it(self, server):
        app = http_app(server, "0.0.0.0", token="s3cret-token-value", allowed_hosts=["kb.internal"])
        with TestClient(app, base_url="http://kb.internal:8765") as client:

            def post(headers: dict[str, str], host: str | None = None):
                return client.post(
                    "/mcp", json=INITIALIZE, headers={**ACCEPT, **headers, **({"host": host} if host else {})}
                )

            missing = post({})
            assert missing.status_code == 401 and missing.json()["error"] == "unauthorized"
            assert "s3cret" not in missing.text
            assert post({"authorization": "Bearer wrong"}).status_code == 401
            assert post({"authorization": "s3cret-token-value"}).status_code == 401
            assert post({"authorization": "Bearer s3cret-token-value"}).status_code == 200
            # the token does not switch DNS-rebinding protection off
            assert post({"authorization": "Bearer s3cret-token-value"}, host="evil.example").status_code in (400, 421)

    @pytest.mark.parametrize(
        ("host", "allow", "token", "match"),
        [
            ("0.0.0.0", False, "t" * 20, "needs --allow-remote"),
            ("192.168.1.9", True, None, f"needs a bearer token: set {AUTH_ENV}"),
        ],
    )
    def test_binding_beyond_loopback_is_refused_without_consent_and_token(self, host, allow, token, match):
        with pytest.raises(ValueError, match=match):
            check_bind(host, allow, token)
        check_bind("127.0.0.1", False, None)
        check_bind("::1", False, None)

    def test_the_cli_refuses_before_loading_anything(self, tmp_path, capsys, monkeypatch):
        monkeypatch.delenv(AUTH_ENV, raising=False)
        argv = ["serve", "--transport", "http", "--host", "0.0.0.0", "--data-dir", str(tmp_path / "none")]
        assert main(argv) == 2
        assert "--allow-remote" in capsys.readouterr().err
        assert main([*argv, "--allow-remote"]) == 2
        assert AUTH_ENV in capsys.readouterr().err
        assert not (tmp_path / "none").exists()
