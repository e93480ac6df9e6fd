from __future__ import annotations

import json
import os

from components.trace.trace_spool import TraceSpool


class TestTraceSpool:
    def test_init_touches_nothing(self, tmp_path):
        spool = TraceSpool(tmp_path / "sub" / "spool.jsonl")
        assert not (tmp_path / "sub").exists()
        assert not spool.pending()

    def test_append_claim_done(self, tmp_path):
        spool = TraceSpool(tmp_path / "spool.jsonl")
        spool.append({"invocation_id": "a", "query": "磁盘"})
        spool.append({"invocation_id": "b", "query": "q"})
        assert spool.pending()
        batches = list(spool.claim())
        assert len(batches) == 1 and [r["invocation_id"] for r in batches[0].rows] == ["a", "b"]
        assert not (tmp_path / "spool.jsonl").exists()  # claimed: new appends go to a fresh file
        spool.append({"invocation_id": "c"})
        assert [r["invocation_id"] for r in spool.rows()] == ["c", "a", "b"]
        spool.done(batches[0])
        assert [r["invocation_id"] for r in spool.rows()] == ["c"]

    def test_damaged_lines_go_to_the_rejected_file(self, tmp_path):
        path = tmp_path / "spool.jsonl"
        path.write_bytes(b'{"invocation_id": "a"}\n{"cut\n[1, 2]\n\xff\xfe\n{"invocation_id": "b"}\n')
        spool = TraceSpool(path)
        (batch,) = spool.claim()
        assert [r["invocation_id"] for r in batch.rows] == ["a", "b"]
        assert batch.rejected == 3
        assert len(spool.rejected_path.read_text(encoding="utf-8").splitlines()) == 3

    def test_a_fresh_claim_of_another_process_is_left_alone_a_stale_one_taken(self, tmp_path):
        path = tmp_path / "spool.jsonl"
        live = tmp_path / "spool.jsonl.111-live.claimed"
        stale = tmp_path / "spool.jsonl.222-dead.claimed"
        for claimed, key in ((live, "live"), (stale, "stale")):
            claimed.write_text(json.dumps({"invocation_id": key}) + "\n")
        os.utime(stale, (0, 0))
        batches = list(TraceSpool(path).claim())
        assert [r["invocation_id"] for b in batches for r in b.rows] == ["stale"]
        assert live.exists()

    def test_release_makes_a_batch_claimable_at_once(self, tmp_path):
        spool = TraceSpool(tmp_path / "spool.jsonl")
        spool.append({"invocation_id": "a"})
        (batch,) = spool.claim()
        assert list(spool.claim()) == []  # its claim is fresh
        spool.release(batch)
        assert [r["invocation_id"] for b in spool.claim() for r in b.rows] == ["a"]

    def test_reject_keeps_refused_rows(self, tmp_path):
        spool = TraceSpool(tmp_path / "spool.jsonl")
        spool.reject([{"invocation_id": "x"}])
        spool.reject([])
        assert json.loads(spool.rejected_path.read_text()) == {"invocation_id": "x"}
