from __future__ import annotations

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.preprocessors.heading_chunker import HeadingChunker, chunk_id

BODY = (
    "# Disk Full\n\nIntro.\n\n## Diagnosis\n\n"
    + " ".join(f"Sentence {i} about disks." for i in range(80))
    + "\n\n```bash\n# not a heading\n"
    + "\n".join(f"echo line {i}" for i in range(60))
    + "\n```\n\n### 查找大文件\n\n"
    + "".join(f"当磁盘使用率超过百分之九十时{i}，请清理日志文件。" for i in range(40))
)


def _doc(body: str = BODY, **meta) -> Document:
    base = {"source": "alerts/disk.md", "doc_id": "alerts-disk", "title": "Disk Full", "doc_version": "v1"}
    return Document(content=body, meta={**base, **meta})


class TestHeadingChunker:
    def test_init_and_invalid(self):
        chunker = HeadingChunker()
        assert (chunker.max_chars, chunker.overlap_chars, chunker.cjk_weight) == (1200, 150, 3)
        with pytest.raises(ValueError, match="max_chars=10"):
            HeadingChunker(max_chars=10)
        with pytest.raises(ValueError, match="overlap_chars=700"):
            HeadingChunker(max_chars=1000, overlap_chars=700)
        with pytest.raises(ValueError, match="cjk_weight=0"):
            HeadingChunker(cjk_weight=0)

    def test_to_dict_from_dict(self):
        data = component_to_dict(HeadingChunker(max_chars=500, overlap_chars=50), "chunker")
        assert data["init_parameters"] == {"max_chars": 500, "overlap_chars": 50, "cjk_weight": 3}
        assert component_from_dict(HeadingChunker, data, "chunker").max_chars == 500

    def test_breadcrumbs_follow_headings(self):
        chunks = HeadingChunker(max_chars=400, overlap_chars=80).run([_doc()])["documents"]
        crumbs = [c.meta["breadcrumb"] for c in chunks]
        assert crumbs[0] == "Disk Full"
        assert "Disk Full > Diagnosis" in crumbs
        assert crumbs[-1] == "Disk Full > Diagnosis > 查找大文件"

    def test_a_breadcrumb_reads_as_the_headings_words(self):
        body = "## The `serve` command\n\nServes.\n\n### **Options** [](#options)\n\nFlags.\n\n```\n## `x`\n```\n"
        chunks = HeadingChunker().run([_doc(body)])["documents"]
        assert [c.meta["breadcrumb"] for c in chunks] == [
            "Disk Full > The serve command",
            "Disk Full > The serve command > Options",
        ]
        assert chunks[-1].content.endswith("```\n## `x`\n```")  # code is not a heading, and stays as written

    def test_chunks_are_bounded_and_overlap(self):
        chunker = HeadingChunker(max_chars=400, overlap_chars=80)
        chunks = chunker.run([_doc()])["documents"]
        prose = [c for c in chunks if "```" not in c.content]
        assert all(chunker._size(c.content) <= 400 for c in prose)
        diag = [c.content for c in prose if c.meta["breadcrumb"] == "Disk Full > Diagnosis"]
        assert len(diag) >= 3
        last_sentence = diag[0].rsplit(". ", 1)[-1]
        assert last_sentence in diag[1]
        assert not diag[1].startswith(diag[0][:40])

    def test_code_block_is_never_cut(self):
        chunks = HeadingChunker(max_chars=400, overlap_chars=80).run([_doc()])["documents"]
        with_code = [c.content for c in chunks if "```bash" in c.content]
        assert len(with_code) == 1
        assert with_code[0].count("```") == 2
        assert "echo line 0" in with_code[0] and "echo line 59" in with_code[0]
        assert all(c.meta["breadcrumb"] != "Disk Full > Diagnosis > not a heading" for c in chunks)

    def test_chinese_sentences_end_at_chinese_punctuation(self):
        chunks = HeadingChunker(max_chars=300, overlap_chars=60).run([_doc()])["documents"]
        zh = [c.content for c in chunks if c.meta["breadcrumb"].endswith("查找大文件")]
        assert len(zh) >= 2
        assert all(c.endswith("。") for c in zh)

    def test_meta_ids_and_counts(self):
        chunks = HeadingChunker(max_chars=400, overlap_chars=80).run([_doc(keywords=["disk"], category="alerts")])[
            "documents"
        ]
        assert [c.meta["chunk_index"] for c in chunks] == list(range(len(chunks)))
        assert {c.meta["total_chunks"] for c in chunks} == {len(chunks)}
        assert all(c.meta["category"] == "alerts" and c.meta["keywords"] == ["disk"] for c in chunks)
        assert chunks[1].id == chunk_id("alerts/disk.md", 1, "v1")
        assert chunk_id("alerts/disk.md", 1, "v2") != chunks[1].id
        assert len({c.meta["content_hash"] for c in chunks}) == len(chunks)

    def test_input_not_mutated_and_empty_input(self):
        doc = _doc()
        before = dict(doc.meta)
        HeadingChunker().run([doc])
        assert doc.meta == before
        assert HeadingChunker().run([]) == {"documents": []}

    def test_document_of_headings_only_gives_one_chunk(self):
        chunks = HeadingChunker().run([_doc("# Footnotes\n\n## Footnotes\n")])["documents"]
        assert len(chunks) == 1 and "Footnotes" in chunks[0].content
        assert chunks[0].meta["total_chunks"] == 1

    def test_a_long_table_is_split_between_rows_each_part_with_the_header(self):
        rows = "\n".join(f"| flag{i} | {'a long explanation of the flag ' * 2}{i} |" for i in range(40))
        body = f"# Flags\n\nIntro.\n\n| Flag | Meaning |\n|---|---|\n{rows}\n"
        chunks = HeadingChunker(max_chars=400, overlap_chars=50).run([_doc(body)])["documents"]
        tables = [c.content for c in chunks if "| Flag | Meaning |" in c.content]
        assert len(tables) > 3
        seen = []
        for table in tables:
            lines = table.split("\n")
            lines = lines[lines.index("| Flag | Meaning |") :]  # the first part follows the intro in its chunk
            assert lines[:2] == ["| Flag | Meaning |", "|---|---|"]
            assert all(line.startswith("| flag") and line.endswith("|") for line in lines[2:])
            seen += lines[2:]
        assert seen == rows.split("\n")  # every row once, none cut

    def test_plain_text_has_no_headings_and_every_chunk_its_lines(self):
        body = "Title line\n\n# not a heading\n\nSecond paragraph.\n\n```\nnot a fence either\n"
        [chunk] = HeadingChunker().run([_doc(body, markup="text", title="Notes")])["documents"]
        assert chunk.meta["breadcrumb"] == "Notes" and "# not a heading" in chunk.content
        assert (chunk.meta["line_start"], chunk.meta["line_end"]) == (1, 8)

    def test_markdown_lines_follow_the_converters_line_map(self):
        # four lines of front matter before the body; body lines 2-3 came from an include on file line 7
        body = "# T\n\nincluded one\nincluded two\n\nown text"
        line_map = [[0, 5, 1], [2, 7, 0], [4, 8, 1]]
        chunks = HeadingChunker().run([_doc(body, line_map=line_map, title="T")])["documents"]
        [chunk] = chunks
        assert (chunk.meta["line_start"], chunk.meta["line_end"]) == (7, 9)
        assert "line_map" not in chunk.meta
        # a chunk that ends inside the included lines ends on the include's line
        body = "# T\n\nincluded one\nincluded two\n# U\n\nown text"
        line_map = [[0, 5, 1], [2, 7, 0], [4, 8, 1]]
        spans = [
            (c.meta["line_start"], c.meta["line_end"])
            for c in HeadingChunker().run([_doc(body, line_map=line_map)])["documents"]
        ]
        assert spans == [(7, 7), (10, 10)]

    def test_form_feeds_give_each_chunk_its_pages(self):
        body = "First page text.\fSecond page, one.\n\nSecond page, two.\fThird page."
        chunks = HeadingChunker(max_chars=100, overlap_chars=0).run([_doc(body, markup="text")])["documents"]
        pages = [(c.meta["page_start"], c.meta["page_end"]) for c in chunks]
        assert pages[0][0] == 1 and pages[-1][1] == 3
        assert all("line_start" not in c.meta for c in chunks)
        assert all("\f" not in c.content for c in chunks)

    def test_a_paged_documents_outline_gives_the_breadcrumb_at_the_line_that_reads_as_the_entry(self):
        body = (
            "A Report\nabout things\n\nIntro text.\n1. Setup of the\nsystem\nInstall it first."
            "\fMore setup text.\n1.1 DISKS\nDisks are mounted.\fClosing page words.\fLast page."
        )
        outline = [[1, 1, "Setup of the system"], [2, 2, "1.1 Disks"], [3, 1, "Results"], [9, 1, "Nowhere"]]
        chunks = HeadingChunker().run([_doc(body, markup="text", title="A Report", outline=outline, page_count=4)])[
            "documents"
        ]
        placed = [(c.meta["breadcrumb"], c.content, c.meta["page_start"], c.meta["page_end"]) for c in chunks]
        assert placed == [
            ("A Report", "A Report\nabout things\n\nIntro text.", 1, 1),
            # the wrapped title is the heading, not text; the section goes on over the page break
            ("A Report > Setup of the system", "Install it first.\n\nMore setup text.", 1, 2),
            ("A Report > Setup of the system > 1.1 Disks", "Disks are mounted.", 2, 2),
            # no line of page 3 reads "Results": the entry starts at the page's first line, which stays text
            ("A Report > Results", "Closing page words.\n\nLast page.", 3, 4),
        ]
        assert all("outline" not in c.meta and "page_count" not in c.meta for c in chunks)

    def test_a_single_page_document_still_cites_its_page(self):
        [chunk] = HeadingChunker().run([_doc("One page only.", markup="text", page_count=1)])["documents"]
        assert (chunk.meta["page_start"], chunk.meta["page_end"]) == (1, 1) and "line_start" not in chunk.meta

    def test_a_description_the_text_lacks_leads_the_page(self):
        [lead, *_] = HeadingChunker().run([_doc("## Setup\n\nRun it.", description="How to set it up.")])["documents"]
        assert lead.content.startswith("How to set it up.")
        said = HeadingChunker().run([_doc("How to set it up. Run it.", description="How to set it up.")])
        assert said["documents"][0].content == "How to set it up. Run it."
        # under the page's own `# Title` the lead joins the first words, never a chunk of its own
        [page] = HeadingChunker().run([_doc("# Disk Full\n\nRun df.", description="When a disk fills up.")])[
            "documents"
        ]
        assert page.content == "When a disk fills up.\n\nRun df." and page.meta["breadcrumb"] == "Disk Full"
