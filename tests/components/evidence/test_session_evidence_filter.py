from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.core.versions import text_key
from components.evidence.context_packer import ContextPacker
from components.evidence.lookup_result_assembler import LookupResultAssembler
from components.evidence.session_evidence_filter import SessionEvidenceFilter
from components.trace.trace_recorder import TraceRecorder
from components.trace.trace_store import ToolInvocation, TraceStore


def _doc(key: str, content: str | None = None) -> Document:
    source = key.split("#", maxsplit=1)[0]
    return Document(
        content=content or f"Evidence from {key}.",
        score=0.9,
        meta={"source": source, "evidence_key": key, "title": source, "hit_reasons": ["l1_unfiltered"]},
    )


def _keyed(doc: Document) -> Document:
    """A copy of `doc` with the text key the retriever gives candidates."""
    return Document(
        content=doc.content,
        score=doc.score,
        meta={**doc.meta, "text_key": text_key(doc.meta["source"], doc.content)},
    )


def _row(
    session_id: str | None, keys: list[str], *, found: bool = True, blocks: list[dict] | None = None
) -> ToolInvocation:
    blocks = blocks if blocks is not None else [{"evidence_key": k, "preview": "..."} for k in keys]
    return ToolInvocation(
        tool_name="lookup_knowledge",
        session_id=session_id,
        query="q",
        found=found,
        status="evidence" if found else "no_evidence",
        retrieval_layer="L1",
        evidence_block_count=len(blocks),
        retrieval_details={"evidence_blocks": blocks},
    )


def _blocked_url(tmp_path: Path) -> str:
    """A SQLite URL under a regular file: the database can be neither created nor read."""
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    return f"sqlite:///{blocker}/sub/traces.db"


@pytest.fixture
def db_url(tmp_path):
    return f"sqlite:///{tmp_path}/traces.db"


@pytest.fixture
def seeded(db_url):
    """s1 already received a.md#0 and b.md#0; c.md#0 was only in a not-found row; s2 received d.md#0.

    Rows without a session (None or "") returned n.md#0 and e.md#0.
    """
    store = TraceStore(db_url)
    store.write(_row("s1", ["a.md#0"]))
    store.write(_row("s1", ["b.md#0"]))
    store.write(_row("s1", ["c.md#0"], found=False))
    store.write(_row("s2", ["d.md#0"]))
    store.write(_row(None, ["n.md#0"]))
    store.write(_row("", ["e.md#0"]))
    store.close()
    return db_url


@pytest.fixture
def make_filter():
    made: list[SessionEvidenceFilter] = []

    def make(*args, **kwargs) -> SessionEvidenceFilter:
        f = SessionEvidenceFilter(*args, **kwargs)
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()


def _keys(docs: list[Document]) -> list[str]:
    return [d.meta["evidence_key"] for d in docs]


class TestSessionEvidenceFilter:
    def test_init_defaults(self):
        f = SessionEvidenceFilter()
        assert f.database_url == "sqlite:///data/traces.db"
        assert f.spool_path == "data/trace_spool.jsonl"

    def test_init_custom(self, tmp_path, db_url):
        f = SessionEvidenceFilter(database_url=db_url, spool_path=str(tmp_path / "spool.jsonl"))
        assert (f.database_url, f.spool_path) == (db_url, str(tmp_path / "spool.jsonl"))

    def test_invalid_init(self):
        with pytest.raises(ValueError, match="database_url"):
            SessionEvidenceFilter(database_url="")

    def test_to_dict_from_dict(self, tmp_path, db_url):
        spool = str(tmp_path / "spool.jsonl")
        data = component_to_dict(
            SessionEvidenceFilter(database_url=db_url, spool_path=spool, timeout_s=0.25), "session_filter"
        )
        assert data["init_parameters"] == {
            "database_url": db_url,
            "spool_path": spool,
            "timeout_s": 0.25,
            "database_password": {"type": "env_var", "env_vars": ["TRACE_DB_PASSWORD"], "strict": False},
        }
        restored = component_from_dict(SessionEvidenceFilter, data, "session_filter")
        assert (restored.database_url, restored.spool_path, restored.timeout_s) == (db_url, spool, 0.25)

    @pytest.mark.integration
    def test_drops_blocks_already_returned_in_the_session(self, seeded, make_filter):
        docs = [_doc("a.md#0"), _doc("x.md#0"), _doc("b.md#0"), _doc("y.md#1")]
        out = make_filter(database_url=seeded).run(documents=docs, session_id="s1")
        assert _keys(out["documents"]) == ["x.md#0", "y.md#1"]
        summary = out["session_summary"]
        assert summary["session_id"] == "s1"
        assert summary["suppressed"] == ["a.md#0", "b.md#0"]
        assert summary["previously_returned"] == 2
        assert "error" not in summary

    @pytest.mark.parametrize("session_id", [None, ""])
    def test_a_cursors_keys_are_held_back_without_a_session(self, tmp_path, make_filter, session_id):
        docs = [_doc("a.md#0"), _doc("x.md#0"), _doc("b.md#1")]
        store = make_filter(database_url=f"sqlite:///{tmp_path / 'none.db'}", spool_path=None)
        out = store.run(documents=docs, session_id=session_id, exclude=["b.md#1", "a.md#0", "gone.md#3"])
        assert _keys(out["documents"]) == ["x.md#0"]
        summary = out["session_summary"]
        assert summary["paged"] == ["a.md#0", "b.md#1"]
        assert summary["excluded"] == ["b.md#1", "a.md#0", "gone.md#3"]
        assert _keys(docs) == ["a.md#0", "x.md#0", "b.md#1"]  # the input is not changed

    @pytest.mark.integration
    def test_a_cursor_and_the_session_hold_back_together(self, seeded, make_filter):
        docs = [_doc("a.md#0"), _doc("x.md#0"), _doc("y.md#1")]
        out = make_filter(database_url=seeded).run(documents=docs, session_id="s1", exclude=["y.md#1"])
        assert _keys(out["documents"]) == ["x.md#0"]
        assert out["session_summary"]["suppressed"] == ["a.md#0"] and out["session_summary"]["paged"] == ["y.md#1"]

    @pytest.mark.integration
    def test_a_text_another_release_gave_in_the_session_is_held_back(self, db_url, make_filter):
        # docs/x.md#3 and versioned_docs/version-v2.0/x.md#5 hold one text: the session got it from the current page
        text = "Uninstalling does not stop running tasks."
        copy_ = _doc("versioned_docs/version-v2.0/x.md#5", text)
        other = _doc("versioned_docs/version-v2.0/x.md#6", "Run helm uninstall.")
        store = TraceStore(db_url)
        store.write(_row("s1", [], blocks=[{"evidence_key": "docs/x.md#3", "text_key": text_key("docs/x.md", text)}]))
        store.close()
        out = make_filter(database_url=db_url).run(documents=[_keyed(copy_), _keyed(other)], session_id="s1")
        assert _keys(out["documents"]) == ["versioned_docs/version-v2.0/x.md#6"]
        assert out["session_summary"]["suppressed"] == ["versioned_docs/version-v2.0/x.md#5"]
        assert out["session_summary"]["previously_returned"] == 1  # one block, not its two keys

    def test_a_cursor_holds_back_a_text_by_its_text_key(self, tmp_path, make_filter):
        text = "Uninstalling does not stop running tasks."
        docs = [_keyed(_doc("versioned_docs/version-v2.0/x.md#5", text)), _keyed(_doc("x.md#0"))]
        store = make_filter(database_url=f"sqlite:///{tmp_path / 'none.db'}", spool_path=None)
        out = store.run(documents=docs, exclude=["docs/x.md#3", text_key("docs/x.md", text)])
        assert _keys(out["documents"]) == ["x.md#0"]
        assert out["session_summary"]["paged"] == ["versioned_docs/version-v2.0/x.md#5"]

    @pytest.mark.integration
    def test_other_session_is_not_affected(self, seeded, make_filter):
        docs = [_doc("a.md#0"), _doc("b.md#0"), _doc("d.md#0")]
        out = make_filter(database_url=seeded).run(documents=docs, session_id="s2")
        assert _keys(out["documents"]) == ["a.md#0", "b.md#0"]
        assert out["session_summary"]["suppressed"] == ["d.md#0"]

    @pytest.mark.integration
    def test_unknown_session_keeps_everything(self, seeded, make_filter):
        docs = [_doc("a.md#0"), _doc("b.md#0")]
        out = make_filter(database_url=seeded).run(documents=docs, session_id="s3")
        assert _keys(out["documents"]) == ["a.md#0", "b.md#0"]
        assert out["session_summary"]["suppressed"] == []
        assert out["session_summary"]["previously_returned"] == 0

    @pytest.mark.integration
    @pytest.mark.parametrize("session_id", [None, ""])
    def test_without_session_nothing_is_held_back(self, seeded, make_filter, session_id):
        docs = [_doc("a.md#0"), _doc("b.md#0"), _doc("d.md#0"), _doc("n.md#0"), _doc("e.md#0")]
        out = make_filter(database_url=seeded).run(documents=docs, session_id=session_id)
        assert _keys(out["documents"]) == ["a.md#0", "b.md#0", "d.md#0", "n.md#0", "e.md#0"]
        assert out["session_summary"]["session_id"] is None
        assert out["session_summary"]["suppressed"] == []

    @pytest.mark.integration
    def test_not_found_rows_do_not_count(self, seeded, make_filter):
        out = make_filter(database_url=seeded).run(documents=[_doc("c.md#0")], session_id="s1")
        assert _keys(out["documents"]) == ["c.md#0"]
        assert out["session_summary"]["suppressed"] == []

    @pytest.mark.integration
    def test_spooled_rows_count(self, tmp_path, db_url, make_filter):
        spool = tmp_path / "trace_spool.jsonl"
        down = TraceStore(_blocked_url(tmp_path), spool_path=str(spool))
        assert down.write(_row("s1", ["spooled.md#0"])) is None
        assert down.write(_row("s1", ["spooled-miss.md#0"], found=False)) is None
        down.close()
        assert spool.exists()

        docs = [_doc("spooled.md#0"), _doc("spooled-miss.md#0"), _doc("fresh.md#0")]
        with_spool = make_filter(database_url=db_url, spool_path=str(spool)).run(documents=docs, session_id="s1")
        assert _keys(with_spool["documents"]) == ["spooled-miss.md#0", "fresh.md#0"]
        assert with_spool["session_summary"]["suppressed"] == ["spooled.md#0"]

        without_spool = make_filter(database_url=db_url).run(documents=docs, session_id="s1")
        assert _keys(without_spool["documents"]) == _keys(docs)

    @pytest.mark.integration
    def test_unreadable_database_passes_documents_through(self, tmp_path, make_filter):
        docs = [_doc("a.md#0"), _doc("b.md#0")]
        out = make_filter(database_url=_blocked_url(tmp_path)).run(documents=docs, session_id="s1")
        assert out["documents"] == docs
        summary = out["session_summary"]
        assert summary["error"]
        assert "unavailable" in summary["error"]
        assert summary["suppressed"] == []

    @pytest.mark.integration
    def test_unreadable_database_still_holds_back_what_the_spool_remembers(self, tmp_path, make_filter):
        spool = tmp_path / "spool.jsonl"
        down = TraceStore(_blocked_url(tmp_path), spool_path=str(spool))
        down.write(_row("s1", ["spooled.md#0"]))
        down.close()
        docs = [_doc("spooled.md#0"), _doc("fresh.md#0")]
        out = make_filter(database_url=_blocked_url(tmp_path), spool_path=str(spool)).run(
            documents=docs, session_id="s1"
        )
        assert _keys(out["documents"]) == ["fresh.md#0"]
        assert out["session_summary"]["suppressed"] == ["spooled.md#0"]
        assert "partial" in out["session_summary"]["error"]

    @pytest.mark.integration
    def test_new_rows_are_seen_by_the_same_filter(self, db_url, make_filter):
        session_filter = make_filter(database_url=db_url)
        docs = [_doc("a.md#0"), _doc("b.md#0")]
        assert _keys(session_filter.run(documents=docs, session_id="s1")["documents"]) == ["a.md#0", "b.md#0"]
        store = TraceStore(db_url)
        store.write(_row("s1", ["a.md#0"]))
        store.close()
        assert _keys(session_filter.run(documents=docs, session_id="s1")["documents"]) == ["b.md#0"]

    @pytest.mark.integration
    def test_round_trip_with_recorder_gives_already_returned(self, db_url, make_filter):
        """A lookup recorded by the TraceRecorder makes the same evidence `already_returned` next time."""
        docs = [_doc("alerts/disk.md#0"), _doc("alerts/disk.md#1")]
        session_filter = make_filter(database_url=db_url)
        assembler = LookupResultAssembler()

        def lookup() -> dict:
            filtered = session_filter.run(documents=docs, session_id="s1")
            kept = filtered["documents"]
            return assembler.run(
                query="disk full",
                documents=kept,
                context_pack=ContextPacker().run(documents=kept)["context_pack"],
                retrieval_trace={"attempts": [{"name": "unfiltered", "mode": "dense", "candidate_count": 2}]},
                rerank_trace={},
                dedup_summary={"candidate_count": len(docs)},
                session_summary=filtered["session_summary"],
                session_id="s1",
            )

        first = lookup()
        assert first["result"]["evidenceStatus"] == "evidence"
        recorder = TraceRecorder(database_url=db_url)
        assert recorder.run(result=first["result"], details=first["details"])["result"]["traceId"] is not None
        recorder.close()

        second = lookup()
        assert second["result"]["evidenceStatus"] == "already_returned"
        assert second["details"]["session"]["suppressed"] == ["alerts/disk.md#0", "alerts/disk.md#1"]

    @pytest.mark.integration
    def test_empty_documents(self, seeded, make_filter):
        out = make_filter(database_url=seeded).run(documents=[], session_id="s1")
        assert out["documents"] == []
        assert out["session_summary"]["suppressed"] == []

    def test_empty_documents_without_database(self, tmp_path, make_filter):
        out = make_filter(database_url=f"sqlite:///{tmp_path}/never.db").run(documents=[], session_id=None)
        assert out["documents"] == []
        assert out["session_summary"] == {"session_id": None, "previously_returned": 0, "suppressed": []}

    @pytest.mark.integration
    def test_inputs_not_mutated(self, seeded, make_filter):
        docs = [_doc("a.md#0"), _doc("x.md#0"), _doc("b.md#0")]
        before = copy.deepcopy(docs)
        out = make_filter(database_url=seeded).run(documents=docs, session_id="s1")
        assert _keys(out["documents"]) == ["x.md#0"]
        assert docs == before
        assert out["documents"] is not docs

    @pytest.mark.integration
    def test_a_spooled_row_of_the_wrong_shape_never_fails_a_lookup_while_the_database_is_down(
        self, tmp_path, make_filter, caplog
    ):
        spool = tmp_path / "trace_spool.jsonl"
        garbage = _row("s1", ["garbage.md#0"]).model_dump(mode="json")
        garbage["retrieval_details"] = "garbage"
        down = TraceStore(_blocked_url(tmp_path), spool_path=str(spool))
        down.write(_row("s1", ["spooled.md#0"]))
        down.close()
        with spool.open("a") as handle:
            handle.write(json.dumps(garbage) + "\n")
        docs = [_doc("spooled.md#0"), _doc("garbage.md#0"), _doc("fresh.md#0")]
        session_filter = make_filter(database_url=_blocked_url(tmp_path), spool_path=str(spool))
        for _ in range(2):  # every lookup of the session, not only the first
            out = session_filter.run(documents=docs, session_id="s1")
            assert _keys(out["documents"]) == ["garbage.md#0", "fresh.md#0"]
            assert out["session_summary"]["suppressed"] == ["spooled.md#0"]
        assert "wrong shape skipped" in caplog.text

    @pytest.mark.integration
    def test_sessions_that_share_their_first_200_characters_do_not_share_memory(self, db_url, make_filter):
        first, second = "x" * 200 + "-first", "x" * 200 + "-second"
        store = TraceStore(db_url)
        store.write(_row(first, ["first.md#0"]))
        store.close()
        session_filter = make_filter(database_url=db_url)
        docs = [_doc("first.md#0")]
        assert _keys(session_filter.run(documents=docs, session_id=first)["documents"]) == []
        assert _keys(session_filter.run(documents=docs, session_id=second)["documents"]) == ["first.md#0"]

    @pytest.mark.integration
    def test_the_session_is_its_normalized_id(self, seeded, make_filter):
        out = make_filter(database_url=seeded).run(documents=[_doc("a.md#0"), _doc("x.md#0")], session_id=" s1\t")
        assert _keys(out["documents"]) == ["x.md#0"]
        assert out["session_summary"]["session_id"] == "s1"


def _principal_row(session_id: str, principal: str | None, keys: list[str]) -> ToolInvocation:
    row = _row(session_id, keys)
    row.principal = principal
    return row


class TestPrincipals:
    def test_principal_is_an_optional_run_input(self):
        sockets = SessionEvidenceFilter().__haystack_input__._sockets_dict
        assert "principal" in sockets and not sockets["principal"].is_mandatory

    @pytest.mark.integration
    def test_principals_with_the_same_session_id_do_not_share_memory(self, db_url, make_filter):
        """alice's returned evidence is held back from alice's next lookup only, never from bob's or anyone's."""
        docs = [_doc("alerts/disk.md#0"), _doc("alerts/disk.md#1")]
        session_filter = make_filter(database_url=db_url)
        assembler = LookupResultAssembler()
        recorder = TraceRecorder(database_url=db_url)

        def lookup(principal: str | None) -> dict:
            filtered = session_filter.run(documents=docs, session_id="s1", principal=principal)
            kept = filtered["documents"]
            assembled = assembler.run(
                query="disk full",
                documents=kept,
                context_pack=ContextPacker().run(documents=kept)["context_pack"],
                retrieval_trace={"attempts": [{"name": "unfiltered", "mode": "dense", "candidate_count": 2}]},
                rerank_trace={},
                dedup_summary={"candidate_count": len(docs)},
                session_summary=filtered["session_summary"],
                session_id="s1",
            )
            out = recorder.run(result=assembled["result"], details=assembled["details"], principal=principal)
            assert out["result"]["traceId"] is not None
            return out["result"]

        assert lookup("alice")["evidenceStatus"] == "evidence"
        assert lookup("bob")["evidenceStatus"] == "evidence"  # alice's evidence is not suppressed for bob
        assert lookup(None)["evidenceStatus"] == "evidence"  # nor for an anonymous caller of session s1
        assert lookup("alice")["evidenceStatus"] == "already_returned"  # alice's own second call is
        assert lookup("bob")["evidenceStatus"] == "already_returned"
        assert lookup("")["evidenceStatus"] == "already_returned"  # empty: the anonymous caller
        assert lookup("carol")["evidenceStatus"] == "evidence"
        recorder.close()

    @pytest.mark.integration
    def test_the_summary_counts_the_principals_memory_only(self, db_url, make_filter):
        store = TraceStore(db_url)
        store.write(_principal_row("s1", "alice", ["a.md#0", "b.md#0"]))
        store.write(_principal_row("s1", "bob", ["c.md#0"]))
        store.close()
        docs = [_doc("a.md#0"), _doc("c.md#0"), _doc("x.md#0")]
        session_filter = make_filter(database_url=db_url)
        alice = session_filter.run(documents=docs, session_id="s1", principal="alice")
        assert _keys(alice["documents"]) == ["c.md#0", "x.md#0"]
        assert alice["session_summary"]["suppressed"] == ["a.md#0"]
        assert alice["session_summary"]["previously_returned"] == 2
        bob = session_filter.run(documents=docs, session_id="s1", principal="bob")
        assert _keys(bob["documents"]) == ["a.md#0", "x.md#0"] and bob["session_summary"]["previously_returned"] == 1
        anonymous = session_filter.run(documents=docs, session_id="s1")
        assert _keys(anonymous["documents"]) == _keys(docs)

    @pytest.mark.integration
    def test_anonymous_rows_recorded_before_principals_keep_their_memory(self, seeded, make_filter):
        docs = [_doc("a.md#0"), _doc("x.md#0")]
        session_filter = make_filter(database_url=seeded)
        assert _keys(session_filter.run(documents=docs, session_id="s1")["documents"]) == ["x.md#0"]
        assert _keys(session_filter.run(documents=docs, session_id="s1", principal="")["documents"]) == ["x.md#0"]
        alice = session_filter.run(documents=docs, session_id="s1", principal="alice")
        assert _keys(alice["documents"]) == ["a.md#0", "x.md#0"]

    @pytest.mark.integration
    def test_spooled_rows_count_for_their_principal_while_the_database_is_down(self, tmp_path, make_filter):
        spool = tmp_path / "spool.jsonl"
        down = TraceStore(_blocked_url(tmp_path), spool_path=str(spool))
        down.write(_principal_row("s1", "alice", ["alice.md#0"]))
        down.write(_principal_row("s1", None, ["anonymous.md#0"]))
        down.close()
        docs = [_doc("alice.md#0"), _doc("anonymous.md#0")]
        session_filter = make_filter(database_url=_blocked_url(tmp_path), spool_path=str(spool))
        alice = session_filter.run(documents=docs, session_id="s1", principal="alice")
        assert _keys(alice["documents"]) == ["anonymous.md#0"] and "partial" in alice["session_summary"]["error"]
        bob = session_filter.run(documents=docs, session_id="s1", principal="bob")
        assert _keys(bob["documents"]) == ["alice.md#0", "anonymous.md#0"]
        anonymous = session_filter.run(documents=docs, session_id="s1")
        assert _keys(anonymous["documents"]) == ["alice.md#0"]
