from __future__ import annotations

import pytest

from components.core.citation import VERSION_CHARS, Citation, chunk_id, chunk_ids


class TestCitation:
    def test_chunk_ids_follow_source_position_and_version(self):
        ids = chunk_ids("alerts/disk.md", "v1", 3)
        assert ids == [chunk_id("alerts/disk.md", i, "v1") for i in range(3)]
        assert len(set(ids)) == 3 and all(len(i) == 32 for i in ids)
        assert chunk_id("alerts/disk.md", 0, "v2") != ids[0]

    def test_a_citation_reads_back_as_written(self):
        cited = Citation.of("docs/a b/页面.md", 12, "0123456789abcdef0123")
        assert str(cited) == "docs/a b/页面.md#12@0123456789ab"
        assert Citation.parse(str(cited)) == cited
        assert len(cited.version) == VERSION_CHARS

    def test_a_source_with_a_hash_sign_still_reads_back(self):
        cited = Citation.of("notes/c#-tips.md", 2, "abcdef123456")
        assert Citation.parse(str(cited)) == cited

    def test_it_matches_the_version_it_was_read_in(self):
        cited = Citation.of("a.md", 0, "0123456789abcdef")
        assert cited.matches("0123456789abcdef") and not cited.matches("f123456789abcdef")

    @pytest.mark.parametrize("text", ["", "a.md", "a.md#x@v1", "a.md#1@", "#1@v1", "a.md#1@v-1", 42, None])
    def test_anything_else_is_refused_with_the_form(self, text):
        with pytest.raises(ValueError, match="<source>#<chunk index>@<version>"):
            Citation.parse(text)
