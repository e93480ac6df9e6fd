from __future__ import annotations

import pytest

from components.core.atomic_file import write_atomically


class TestWriteAtomically:
    def test_writes_the_file_and_its_folder_and_leaves_nothing_else(self, tmp_path):
        path = tmp_path / "new" / "file.bin"
        write_atomically(path, lambda out: out.write(b"first"))
        write_atomically(path, lambda out: out.write(b"second"))
        assert path.read_bytes() == b"second"
        assert list(path.parent.iterdir()) == [path]

    def test_a_failing_write_keeps_the_previous_file_and_no_temporary_one(self, tmp_path):
        path = tmp_path / "file.bin"
        path.write_bytes(b"previous")

        def half_then_fail(out):
            out.write(b"half")
            raise RuntimeError("disk gone")

        with pytest.raises(RuntimeError, match="disk gone"):
            write_atomically(path, half_then_fail)
        assert path.read_bytes() == b"previous"
        assert list(tmp_path.iterdir()) == [path]

    def test_a_folder_that_cannot_be_made_raises(self, tmp_path):
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        with pytest.raises(OSError):
            write_atomically(blocker / "sub" / "x.bin", lambda out: out.write(b"x"))
