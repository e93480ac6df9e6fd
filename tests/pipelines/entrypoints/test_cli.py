from __future__ import annotations

import json

import pytest

from components.core.lookup_result import LookupResult
from pipelines.entrypoints.cli import _print_index_summary, main
from pipelines.settings import Deployment

pytestmark = pytest.mark.integration


@pytest.fixture
def indexed(tmp_path, tiny_kb, capsys):
    data = tmp_path / "data"
    assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data), "--quiet"]) == 0
    capsys.readouterr()
    return tiny_kb, data


class TestCli:
    def test_index_prints_a_summary_and_reuses_the_index(self, tmp_path, tiny_kb, capsys, monkeypatch):
        data = tmp_path / "data"
        monkeypatch.setenv("TRACE_DB_URL", "postgresql+psycopg://agent:s3cret-pw@127.0.0.1:1/traces")
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data)]) == 0
        out = capsys.readouterr()
        assert "s3cret-pw" not in out.out + out.err and "postgresql+psycopg://agent:***@127.0.0.1:1/traces" in out.out
        assert "Indexed 3 of 3 files" in out.out and "chars/s" in out.out and "0 failed" in out.out
        assert "Indexing" in out.err  # the progress bar
        assert str(data / "milvus.db") in out.out
        name = json.loads((data / "knowledge_index.json").read_text())["statistics"]["bm25_index"]
        assert f"BM25: in-process on {data / name} (`lexical_source: milvus` runs it inside Milvus)" in out.out
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert (summary["indexed"], summary["skipped"], summary["chunks"]) == (0, 3, 0)
        assert (summary["bm25"], summary["bm25_index"]) == ("milvus", name)

    # an index file of an earlier release has the embedded characters' rate only
    @pytest.mark.parametrize("rate_field", ["bytes_per_second", "chars_per_second"])
    def test_a_long_index_run_states_its_estimate_first_and_a_short_one_does_not(
        self, tmp_path, tiny_kb, capsys, rate_field
    ):
        data = tmp_path / "data"
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data), "--quiet"]) == 0
        capsys.readouterr()
        index = json.loads((data / "knowledge_index.json").read_text())
        index.pop("bytes_per_second")
        index[rate_field] = 10.0  # a slow machine measured by the last run: 1,000 bytes take 1.7 min
        (data / "knowledge_index.json").write_text(json.dumps(index))
        (tiny_kb / "alerts" / "long.md").write_text("# Long\n\n" + "Disk pressure. " * 66, encoding="utf-8")
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data)]) == 0
        first = capsys.readouterr().out.split("\n")[0]
        assert first == "Indexing 1 files (998 bytes): about 2 min at 10 bytes/s (measured by the last run)"
        (tiny_kb / "alerts" / "short.md").write_text("# Short\n\nA line.", encoding="utf-8")
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data), "--quiet"]) == 0
        assert "about" not in capsys.readouterr().out  # --quiet: no estimate
        (tiny_kb / "alerts" / "short.md").write_text("# Short\n\nTwo lines.", encoding="utf-8")
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data)]) == 0
        assert capsys.readouterr().out.startswith("Indexed 1 of 5 files")  # half a minute or less: said after

    def test_index_missing_folder_exits_2(self, tmp_path, capsys):
        assert main(["index", "--knowledge", str(tmp_path / "nope"), "--data-dir", str(tmp_path / "d")]) == 2
        assert "does not exist" in capsys.readouterr().err

    def test_ask_json_prints_exactly_the_lookup_result(self, indexed, capsys):
        _, data = indexed
        assert main(["ask", "disk full on the node", "--json", "--data-dir", str(data)]) == 0
        result = json.loads(capsys.readouterr().out)
        LookupResult.model_validate(result)
        assert result["found"] is True and result["evidenceBlocks"][0]["source"] == "alerts/disk.md"

    def test_ask_text_output_names_sources(self, indexed, capsys):
        _, data = indexed
        assert main(["ask", "退款多久到账", "--data-dir", str(data)]) == 0
        out = capsys.readouterr().out
        assert "payments/refund.md" in out and "found=True" in out

    def test_ask_without_evidence_exits_0(self, indexed, tmp_path, capsys):
        _, data = indexed
        strict = tmp_path / "strict.yaml"
        from pipelines.settings import DEFAULT_LOOKUP_PIPELINE

        text = DEFAULT_LOOKUP_PIPELINE.read_text().replace("evidence_threshold: 0.88", "evidence_threshold: 0.999")
        strict.write_text(text)
        code = main(["ask", "gardening tomatoes", "--json", "--data-dir", str(data), "--pipeline", str(strict)])
        assert code == 0
        assert json.loads(capsys.readouterr().out)["evidenceStatus"] == "no_evidence"

    def test_ask_bad_input_exits_2_with_one_line_reason(self, indexed, capsys):
        _, data = indexed
        assert main(["ask", "   ", "--json", "--data-dir", str(data)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "query is empty" in err[0]

    def test_ask_internal_failure_exits_1(self, tmp_path, capsys):
        (tmp_path / "empty").mkdir()  # a data folder where nothing was indexed
        assert main(["ask", "disk full", "--data-dir", str(tmp_path / "empty")]) == 1
        assert "Knowledge retrieval failed" in capsys.readouterr().err

    def test_set_overrides_a_yaml_value_for_one_call_and_a_wrong_one_is_one_line(self, indexed, capsys):
        _, data = indexed
        args = ["ask", "disk full on a node", "--json", "--data-dir", str(data)]
        assert main([*args, "--set", "packer.char_budget=300"]) == 0
        assert json.loads(capsys.readouterr().out)["contextPack"]["charBudget"] == 300
        assert main([*args, "--set", "packer.budget=300"]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert "unexpected keyword argument 'budget'" in line
        assert main([*args, "--set", "nobody.top_k=3"]) == 2
        assert "names 'nobody', which is not a component" in capsys.readouterr().err

    def test_index_takes_set_too(self, tmp_path, tiny_kb, capsys):
        data = tmp_path / "data"
        assert main(["index", "--knowledge", str(tiny_kb), "--data-dir", str(data), "--quiet", "--json"]) == 0
        default = json.loads(capsys.readouterr().out)["chunks"]
        other = tmp_path / "other"
        args = ["index", "--knowledge", str(tiny_kb), "--data-dir", str(other), "--quiet", "--json"]
        assert main([*args, "--set", "chunker.max_chars=100", "--set", "chunker.overlap_chars=0"]) == 0
        assert json.loads(capsys.readouterr().out)["chunks"] > default

    def test_session_flag_and_trace_browsing(self, indexed, capsys):
        _, data = indexed
        for _ in range(2):
            assert main(["ask", "disk full on the node", "--session", "abc", "--json", "--data-dir", str(data)]) == 0
        second = json.loads(capsys.readouterr().out.split("\n}\n")[1] + "\n}")
        assert second["evidenceStatus"] == "already_returned"
        assert main(["trace", "list", "--data-dir", str(data), "--json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert [r["status"] for r in rows[:2]] == ["already_returned", "evidence"]
        assert main(["trace", "show", str(rows[0]["id"]), "--data-dir", str(data), "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["session_id"] == "abc" and "retrieval_details" in shown
        assert main(["trace", "show", str(rows[1]["id"]), "--data-dir", str(data)]) == 0
        report = capsys.readouterr().out
        for step in ("L0 hints", "L1 attempts", "rerank", "evidence", "dedup", "context pack"):
            assert f"\n{step}\n" in report
        assert "session: abc" in report and "status: evidence" in report
        assert main(["trace", "list", "--data-dir", str(data), "--status", "evidence", "--json"]) == 0
        assert [r["status"] for r in json.loads(capsys.readouterr().out)] == ["evidence"]
        assert main(["trace", "list", "--data-dir", str(data), "--since", "2999-01-01", "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == []
        assert main(["trace", "list", "--data-dir", str(data), "--since", "yesterday"]) == 2
        assert "ISO 8601" in capsys.readouterr().err
        assert main(["trace", "replay", "--data-dir", str(data)]) == 0
        assert "0 rows stored" in capsys.readouterr().out
        assert main(["trace", "show", "99999", "--data-dir", str(data)]) == 2

    def test_a_data_dir_that_is_a_file_is_refused_in_one_line(self, tmp_path, capsys):
        blocker = tmp_path / "data"
        blocker.write_text("not a folder")
        assert main(["ask", "disk full", "--data-dir", str(blocker)]) == 2
        assert "is a file, not a folder" in capsys.readouterr().err

    def test_ask_on_a_data_folder_that_does_not_exist_is_refused_and_creates_nothing(self, tmp_path, capsys):
        missing = tmp_path / "mistyped"
        assert main(["ask", "disk full", "--data-dir", str(missing)]) == 2
        err = capsys.readouterr().err
        assert "does not exist" in err and "lookup-knowledge index --data-dir" in err
        assert not missing.exists()

    def test_trace_browsing_creates_nothing_where_nothing_was_recorded(self, tmp_path, capsys):
        missing = tmp_path / "never"
        assert main(["trace", "list", "--data-dir", str(missing)]) == 2
        assert "nothing was recorded" in capsys.readouterr().err
        assert not missing.exists()


def test_a_reader_that_goes_away_stops_the_output_quietly(tmp_path):
    """`trace list | head -1`: no traceback, no "internal error", the shell's SIGPIPE exit code."""
    import subprocess
    import sys

    from components.trace.trace_store import ToolInvocation, TraceStore

    data = tmp_path / "data"
    store = TraceStore(f"sqlite:///{data / 'traces.db'}")
    for i in range(400):  # more than a pipe holds
        store.write(
            ToolInvocation(
                tool_name="t", query=f"q{i} " + "x" * 300, found=False, status="no_evidence", retrieval_layer="L1"
            )
        )
    store.close()
    command = [
        sys.executable,
        "-m",
        "pipelines.entrypoints.cli",
        "trace",
        "list",
        "--limit",
        "400",
        "--data-dir",
        str(data),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline()
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert (proc.returncode, err.decode()) == (141, "")


def test_ask_as_its_own_process_answers_records_and_releases_the_data(tmp_path, tiny_kb):
    """The console-script path of `ask` ends the process itself (no interpreter teardown): the answer is out, the
    exit code is the command's, the trace row is stored and Milvus Lite is released for the next process."""
    import subprocess
    import sys

    from components.trace.trace_store import TraceStore

    data = tmp_path / "data"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pipelines.entrypoints.cli", *args, "--data-dir", str(data)]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)

    assert cli("index", "--knowledge", str(tiny_kb), "--quiet").returncode == 0
    first = cli("ask", "disk full on the node", "--json")
    assert (first.returncode, first.stderr) == (0, "")
    result = json.loads(first.stdout)
    assert result["found"] is True and result["evidenceBlocks"][0]["source"] == "alerts/disk.md"
    second = cli("ask", "退款多久到账")  # the folder is free again: the first process released Milvus Lite
    assert second.returncode == 0 and "payments/refund.md" in second.stdout and "found=True" in second.stdout
    bad = cli("ask", "   ", "--json")
    assert bad.returncode == 2 and bad.stderr.startswith("lookup-knowledge: ") and len(bad.stderr.splitlines()) == 1
    store = TraceStore(f"sqlite:///{data / 'traces.db'}")
    assert sorted(row.status for row in store.list()) == ["evidence", "evidence", "invalid_query"]
    store.close()


def test_the_index_summary_masks_a_password_in_a_milvus_server_uri(tmp_path, capsys):
    deployment = Deployment.resolve(tmp_path / "data", milvus_uri="http://root:Milvus-S3cret@127.0.0.1:19530")
    summary = {
        **dict.fromkeys(("indexed", "files", "chunks", "skipped", "failed", "deleted", "stale_chunks_removed"), 0),
        **{"seconds": 0.0, "characters": 0, "chars_per_second": 0.0, "failures": [], "bm25": "milvus"},
        **{"crosslingual": True, "statistics": ""},
    }
    _print_index_summary(summary, deployment)
    out = capsys.readouterr().out
    assert "Milvus at http://root:***@127.0.0.1:19530," in out and "Milvus-S3cret" not in out


class TestPrincipalCommand:
    def test_add_prints_a_token_once_list_never_shows_one_remove_takes_it_away(self, tmp_path, capsys, monkeypatch):
        from pipelines.access import PRINCIPALS_ENV, Principals

        monkeypatch.delenv(PRINCIPALS_ENV, raising=False)
        data = str(tmp_path / "data")
        assert main(["principal", "add", "alice", "--group", "finance", "--data-dir", data]) == 0
        token = capsys.readouterr().out.strip()
        assert Principals.load(tmp_path / "data" / "principals.yaml").by_token(token).name == "alice"  # type: ignore[union-attr]
        assert main(["principal", "list", "--json", "--data-dir", data]) == 0
        listed = capsys.readouterr().out
        assert json.loads(listed) == [{"name": "alice", "groups": ["finance"], "operator": False, "tokens": 1}]
        assert token not in listed
        assert main(["principal", "remove", "alice", "--data-dir", data]) == 0
        assert main(["principal", "remove", "alice", "--data-dir", data]) == 2
        assert "no principal 'alice'" in capsys.readouterr().err
        assert main(["ask", "q", "--as", "nobody", "--data-dir", data]) == 2  # refused before anything starts
        assert "no principal 'nobody'" in capsys.readouterr().err
