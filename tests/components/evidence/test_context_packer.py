from __future__ import annotations

import copy

import pytest
from haystack import Document
from haystack.core.serialization import component_from_dict, component_to_dict

from components.evidence.context_packer import ContextPacker

SEP = "\n\n"


def _block(i: int, content: str, **meta) -> Document:
    base = {
        "source": f"docs/d{i}.md",
        "evidence_key": f"docs/d{i}.md#0",
        "title": f"Title {i}",
        "breadcrumb": f"Title {i} > Section {i}",
        "hit_reasons": ["l1_unfiltered", f"keyword:k{i}"],
    }
    return Document(content=content, meta={**base, **meta})


def _body(n: int, word: str = "abcdefghij") -> str:
    """`n` characters without whitespace, so a cut never loses characters to rstrip."""
    return (word * (n // len(word) + 1))[:n]


def _header_lines(doc: Document) -> list[str]:
    meta = doc.meta
    return [
        f"title: {meta['title']}",
        f"section: {meta['breadcrumb']}",
        f"why: {', '.join(meta['hit_reasons'])}",
    ]


def _pieces(text: str) -> list[str]:
    return text.split(SEP) if text else []


def _assert_header_intact(piece: str, doc: Document) -> None:
    lines = piece.split("\n")
    assert lines[0].endswith(f"source: {doc.meta['source']}")
    for expected in _header_lines(doc):
        assert expected in lines, f"header line {expected!r} missing or cut in {piece!r}"


class TestContextPacker:
    def test_init_defaults(self):
        packer = ContextPacker()
        assert packer.char_budget == 4000
        assert packer.min_content_chars == 80
        assert packer.separator == "\n\n"

    def test_init_custom(self):
        packer = ContextPacker(char_budget=200, min_content_chars=1, separator="\n---\n")
        assert (packer.char_budget, packer.min_content_chars, packer.separator) == (200, 1, "\n---\n")

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"char_budget": 199}, "char_budget=199"),
            ({"char_budget": 0}, "char_budget=0"),
            ({"min_content_chars": 0}, "min_content_chars=0"),
            ({"min_content_chars": -5}, "min_content_chars=-5"),
            ({"char_budget": 5000, "max_char_budget": 4000}, "max_char_budget=4000 must be at least char_budget=5000"),
        ],
    )
    def test_invalid_init(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            ContextPacker(**kwargs)

    def test_to_dict_from_dict(self):
        packer = ContextPacker(char_budget=1500, min_content_chars=40, separator="\n--\n", max_char_budget=9000)
        data = component_to_dict(packer, "packer")
        assert data["init_parameters"] == {
            "char_budget": 1500,
            "min_content_chars": 40,
            "separator": "\n--\n",
            "max_char_budget": 9000,
        }
        restored = component_from_dict(ContextPacker, data, "packer")
        assert isinstance(restored, ContextPacker)
        assert (restored.char_budget, restored.min_content_chars, restored.separator) == (1500, 40, "\n--\n")
        assert restored.max_char_budget == 9000

    def test_all_blocks_fit(self):
        docs = [_block(i, f"Content of block {i}. " * 5) for i in (1, 2, 3)]
        pack = ContextPacker().run(documents=docs)["context_pack"]
        text = pack["packedText"]
        pieces = _pieces(text)
        assert len(pieces) == 3
        for piece, doc in zip(pieces, docs, strict=True):
            _assert_header_intact(piece, doc)
            assert piece.endswith(doc.content.strip())
        assert pack["usedChars"] == len(text)
        assert pack["usedChars"] <= pack["charBudget"] == 4000
        assert pack["strategy"] == "rank_order_truncate_content"
        assert pack["includedSources"] == ["docs/d1.md#0", "docs/d2.md#0", "docs/d3.md#0"]
        assert pack["omittedSources"] == []
        assert pack["truncatedSources"] == []
        assert "…" not in text

    def test_blocks_keep_rank_order(self):
        docs = [_block(i, f"Body {i}") for i in (3, 1, 2)]
        text = ContextPacker().run(documents=docs)["context_pack"]["packedText"]
        positions = [text.index(f"source: docs/d{i}.md") for i in (3, 1, 2)]
        assert positions == sorted(positions)

    def test_optional_header_parts_are_left_out_when_missing(self):
        doc = Document(content="Plain body.", meta={"source": "docs/plain.md"})
        text = ContextPacker().run(documents=[doc])["context_pack"]["packedText"]
        assert "source: docs/plain.md" in text
        assert "title:" not in text
        assert "section:" not in text
        assert "why:" not in text
        assert text.endswith("Plain body.")

    def test_small_budget_truncates_content_but_not_headers(self):
        docs = [_block(1, _body(100)), _block(2, _body(2000)), _block(3, _body(2000))]
        pack = ContextPacker(char_budget=500, min_content_chars=80).run(documents=docs)["context_pack"]
        text = pack["packedText"]
        assert pack["usedChars"] == len(text) <= 500
        assert pack["charBudget"] == 500
        assert pack["includedSources"] == ["docs/d1.md#0", "docs/d2.md#0"]
        assert pack["truncatedSources"] == ["docs/d2.md#0"]
        assert pack["omittedSources"] == ["docs/d3.md#0"]

        first, second = _pieces(text)
        _assert_header_intact(first, docs[0])
        assert first.endswith(docs[0].content)
        _assert_header_intact(second, docs[1])
        assert second.endswith("…")
        cut = second.split("\n")[-1].removesuffix("…").rstrip()
        assert len(cut) >= 80
        assert docs[1].content.startswith(cut)
        assert docs[1].content not in text
        assert "docs/d3.md" not in text

    def test_block_that_cannot_fit_min_content_is_omitted_whole(self):
        docs = [_block(1, _body(250)), _block(2, _body(500))]
        packer = ContextPacker(char_budget=500, min_content_chars=100)
        pack = packer.run(documents=docs)["context_pack"]
        text = pack["packedText"]
        assert pack["includedSources"] == ["docs/d1.md#0"]
        assert pack["omittedSources"] == ["docs/d2.md#0"]
        assert pack["truncatedSources"] == []
        # omitted whole: neither its header nor any of its content shows up
        assert "docs/d2.md" not in text
        assert "Title 2" not in text
        assert pack["usedChars"] == len(text) <= 500

    def test_lower_min_content_chars_lets_the_same_block_in_truncated(self):
        docs = [_block(1, _body(250)), _block(2, _body(500))]
        pack = ContextPacker(char_budget=500, min_content_chars=1).run(documents=docs)["context_pack"]
        assert pack["includedSources"] == ["docs/d1.md#0", "docs/d2.md#0"]
        assert pack["truncatedSources"] == ["docs/d2.md#0"]
        assert pack["omittedSources"] == []
        _assert_header_intact(_pieces(pack["packedText"])[1], docs[1])

    @pytest.mark.parametrize("budget", [200, 237, 333, 500, 777, 1200, 4000])
    def test_budget_is_never_exceeded_and_every_block_is_accounted_for(self, budget):
        docs = [_block(i, _body(150 * i)) for i in range(1, 7)]
        pack = ContextPacker(char_budget=budget, min_content_chars=20).run(documents=docs)["context_pack"]
        text = pack["packedText"]
        assert pack["usedChars"] == len(text) <= budget
        keys = [d.meta["evidence_key"] for d in docs]
        assert sorted(pack["includedSources"] + pack["omittedSources"]) == sorted(keys)
        assert set(pack["truncatedSources"]) <= set(pack["includedSources"])
        by_key = {d.meta["evidence_key"]: d for d in docs}
        pieces = _pieces(text)
        assert len(pieces) == len(pack["includedSources"])
        for piece, key in zip(pieces, pack["includedSources"], strict=True):
            _assert_header_intact(piece, by_key[key])
            if key in pack["truncatedSources"]:
                assert piece.endswith("…")
            else:
                assert piece.endswith(by_key[key].content)

    def test_source_falls_back_to_source_then_id(self):
        with_source = Document(content="A", meta={"source": "docs/a.md"})
        bare = Document(content="B", meta={})
        pack = ContextPacker().run(documents=[with_source, bare])["context_pack"]
        assert pack["includedSources"] == ["docs/a.md", bare.id]

    def test_run_time_budget_overrides_init(self):
        docs = [_block(1, _body(600)), _block(2, _body(600))]
        packer = ContextPacker(char_budget=4000)
        full = packer.run(documents=docs)["context_pack"]
        assert full["charBudget"] == 4000
        assert full["truncatedSources"] == [] and full["omittedSources"] == []

        small = packer.run(documents=docs, char_budget=300)["context_pack"]
        assert small["charBudget"] == 300
        assert small["usedChars"] == len(small["packedText"]) <= 300
        assert small["truncatedSources"] == ["docs/d1.md#0"]
        assert small["omittedSources"] == ["docs/d2.md#0"]
        # the override does not stick
        assert packer.char_budget == 4000
        assert packer.run(documents=docs)["context_pack"]["charBudget"] == 4000

    def test_custom_separator_between_blocks(self):
        docs = [_block(1, "one"), _block(2, "two")]
        text = ContextPacker(separator="\n=====\n").run(documents=docs)["context_pack"]["packedText"]
        first, second = text.split("\n=====\n")
        assert first.endswith("one")
        assert "source: docs/d2.md" in second
        assert second.endswith("two")

    def test_empty_documents(self):
        out = ContextPacker().run(documents=[])
        pack = out["context_pack"]
        assert pack["packedText"] == ""
        assert pack["usedChars"] == 0
        assert pack["includedSources"] == []
        assert pack["omittedSources"] == []
        assert pack["truncatedSources"] == []
        assert pack["charBudget"] == 4000
        assert out["documents"] == []

    def test_the_delivered_blocks_are_passed_on_as_packed_and_inputs_not_mutated(self):
        docs = [_block(1, _body(100)), _block(2, _body(3000)), _block(3, _body(3000))]
        before = copy.deepcopy(docs)
        out = ContextPacker(char_budget=600).run(documents=docs)
        pack = out["context_pack"]
        assert pack["truncatedSources"] == ["docs/d2.md#0"] and pack["omittedSources"] == ["docs/d3.md#0"]
        assert docs == before
        delivered = list(out["documents"])
        assert [d.meta["evidence_key"] for d in delivered] == ["docs/d1.md#0", "docs/d2.md#0"]  # d3 waits
        assert delivered[0] == before[0]
        cut = delivered[1]
        assert cut.meta["content_truncated"] is True and "content_truncated" not in delivered[0].meta
        assert cut.content.endswith(" …") and before[1].content.startswith(cut.content.removesuffix(" …"))
        assert cut.content in pack["packedText"]  # the block carries exactly what the pack holds

    def test_the_first_block_is_delivered_whatever_the_budget(self):
        first = _block(1, _body(5000), breadcrumb="A long section path > " * 3 + "End")
        out = ContextPacker(char_budget=200, min_content_chars=80).run(documents=[first, _block(2, _body(50))])
        [delivered] = out["documents"]
        assert delivered.meta["evidence_key"] == "docs/d1.md#0" and delivered.meta["content_truncated"] is True
        assert delivered.content.endswith(" …") and len(delivered.content) < 80  # less than the minimum: the first
        assert out["context_pack"]["omittedSources"] == ["docs/d2.md#0"]

    @pytest.mark.parametrize(("asked", "applied"), [(50, 200), (1000, 1000), (10**9, 3000)])
    def test_a_callers_budget_is_kept_between_the_floor_and_the_configured_cap(self, asked, applied):
        docs = [_block(i, _body(900)) for i in range(1, 6)]
        pack = ContextPacker(char_budget=500, max_char_budget=3000).run(documents=docs, char_budget=asked)
        assert pack["context_pack"]["charBudget"] == applied
        assert pack["context_pack"]["usedChars"] <= applied
