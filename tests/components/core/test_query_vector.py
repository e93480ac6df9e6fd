from __future__ import annotations

import copy

import pytest
from haystack.core.pipeline.utils import _deepcopy_with_exceptions

from components.core.query_vector import QueryVector, as_list


class TestQueryVector:
    def test_reads_like_a_list_of_floats(self):
        vector = QueryVector((0.6, 0.8), model="m")
        assert len(vector) == 2 and vector[1] == 0.8 and list(vector) == [0.6, 0.8] and vector.to_list() == [0.6, 0.8]
        assert bool(QueryVector(())) is False

    def test_cannot_change_so_a_copy_is_the_value_itself(self):
        vector = QueryVector((0.6, 0.8))
        with pytest.raises(AttributeError):
            vector.values = (1.0,)  # type: ignore[misc]
        assert copy.deepcopy(vector) is vector
        assert _deepcopy_with_exceptions({"query_embedding": vector})["query_embedding"] is vector

    def test_as_list_takes_any_embedder_output(self):
        assert as_list([0.6, 0.8]) == [0.6, 0.8]
        assert as_list(QueryVector((0.6, 0.8))) == [0.6, 0.8]
        assert as_list(None) == []
        values = [0.6, 0.8]
        assert as_list(values) is not values  # never the caller's list itself
