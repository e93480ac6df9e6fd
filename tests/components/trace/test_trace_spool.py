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

    def test_a_rejected_file_linked_out_of_the_folder_is_replaced_and_its_target_left_alone(self, tmp_path):
        folder = tmp_path / "data"
        folder.mkdir()
        outside = tmp_path / "outside.txt"
        outside.write_text("not the spool's\n")
        spool = TraceSpool(folder / "trace_spool.jsonl")
        spool.rejected_path.symlink_to(outside)
        spool.path.write_text('{"invocation_id": "a"}\n{"cut off\n')
        (batch,) = spool.claim()
        spool.reject([{"invocation_id": "refused"}])
        assert outside.read_text() == "not the spool's\n"
        assert not spool.rejected_path.is_symlink()
        assert spool.rejected_path.read_text().splitlines() == ['{"cut off', '{"invocation_id": "refused"}']
        assert [r["invocation_id"] for r in batch.rows] == ["a"]

    def test_a_hard_linked_rejected_file_is_replaced_too(self, tmp_path):
        folder = tmp_path / "data"
        folder.mkdir()
        outside = tmp_path / "outside.txt"
        outside.write_text("kept\n")
        spool = TraceSpool(folder / "trace_spool.jsonl")
        os.link(outside, spool.rejected_path)
        spool.reject([{"invocation_id": "refused"}])
        assert outside.read_text() == "kept\n"
        assert json.loads(spool.rejected_path.read_text()) == {"invocation_id": "refused"}

    def test_a_spool_that_is_a_link_is_replaced_not_followed(self, tmp_path):
        folder = tmp_path / "data"
        folder.mkdir()
        outside = tmp_path / "outside.jsonl"
        outside.write_text("")
        spool = TraceSpool(folder / "trace_spool.jsonl")
        spool.path.symlink_to(outside)
        spool.append({"invocation_id": "a"})
        assert outside.read_text() == ""
        assert not spool.path.is_symlink()
        assert [r["invocation_id"] for r in spool.rows()] == ["a"]

    def test_append_rows_keeps_their_order(self, tmp_path):
        spool = TraceSpool(tmp_path / "spool.jsonl")
        spool.append_rows([{"invocation_id": "a"}, {"invocation_id": "b"}])
        spool.append_rows([])
        spool.append({"invocation_id": "c", "query": "\udcff"})  # a lone surrogate reads back as itself
        assert [r["invocation_id"] for r in spool.rows()] == ["a", "b", "c"]
        assert list(spool.rows())[2]["query"] == "\udcff"

    def test_a_claim_starts_fresh_even_for_a_spool_last_written_long_ago(self, tmp_path):
        """Renaming keeps a file's time: a claimed old spool looked stale at once, and another replay took it."""
        spool = TraceSpool(tmp_path / "spool.jsonl")
        spool.append({"invocation_id": "a"})
        os.utime(spool.path, (0, 0))
        mine = spool.claim()
        batch = next(mine)
        other = TraceSpool(tmp_path / "spool.jsonl")
        assert list(other.claim()) == []  # another replay leaves it alone
        assert other.in_progress() == 1
        assert [r["invocation_id"] for r in batch.rows] == ["a"]
        spool.done(batch)
        assert other.in_progress() == 0

    def test_a_claim_taken_over_before_it_was_read_is_skipped(self, tmp_path):
        spool = TraceSpool(tmp_path / "spool.jsonl")
        for key in ("a", "b"):
            claimed = tmp_path / f"spool.jsonl.1-{key}.claimed"
            claimed.write_text(json.dumps({"invocation_id": key}) + "\n")
            os.utime(claimed, (0, 0))
        batches = spool.claim()
        first = next(batches)
        for path in tmp_path.glob("*.claimed"):  # another replay takes the second claim meanwhile
            if path != first.path:
                path.rename(tmp_path / "spool.jsonl.2-thief.claimed")
        assert list(batches) == []
        assert [r["invocation_id"] for r in first.rows] in (["a"], ["b"])
