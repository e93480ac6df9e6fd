from __future__ import annotations

import random
import re

from components.core.text_matching import mentions, mentions_folded


def regex_rule(text: str, term: str) -> bool:
    """The matching rule as a regular expression: Chinese terms as substrings, others on ASCII word boundaries."""
    if not term or term not in text:
        return False
    if re.search(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]", term):
        return True
    return re.search(rf"(?<![a-z0-9_]){re.escape(term)}(?![a-z0-9_])", text) is not None


class TestMentions:
    def test_english_terms_match_on_word_boundaries(self):
        assert mentions("High CPU on node-3", "cpu")
        assert not mentions("two cpus are busy", "cpu")
        assert mentions("nginx报错 502", "nginx")
        assert mentions("c++ and rust", "c++")
        assert not mentions("cpu_usage is high", "cpu")
        assert mentions("cpu_usage is high, cpu too", "cpu")  # a later occurrence on boundaries counts
        assert mentions("disk full", "disk full") and not mentions("disk fullness", "disk full")
        assert not mentions("anything", "")

    def test_chinese_terms_match_as_substrings(self):
        assert mentions("节点上磁盘满了怎么办", "磁盘满")
        assert mentions("abc退款def", "退款")

    def test_same_answer_as_the_regular_expression_rule(self):
        rng = random.Random(7)
        alphabet = "ab_1 .-é退款"
        for _ in range(5000):
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
            term = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 3)))
            assert mentions_folded(text, term) == regex_rule(text, term), (text, term)
