from __future__ import annotations

import pytest
from haystack.core.errors import DeserializationError

from components.store.knowledge_collection import KnowledgeCollection
from components.store.knowledge_store import KnowledgeStore, deserialize_store_inplace


class TestKnowledgeStore:
    def test_the_shipped_collection_is_a_knowledge_store(self):
        assert isinstance(KnowledgeCollection(), KnowledgeStore)

    def test_a_serialized_collection_becomes_the_object_in_place(self):
        params = {"collection": KnowledgeCollection(collection_name="kb_x").to_dict(), "top_k": 3}
        deserialize_store_inplace(params)
        assert isinstance(params["collection"], KnowledgeCollection) and params["top_k"] == 3
        assert params["collection"].collection_name == "kb_x"

    def test_anything_but_a_mapping_is_left_alone(self):
        store = KnowledgeCollection()
        params = {"collection": store}
        deserialize_store_inplace(params)
        assert params["collection"] is store
        deserialize_store_inplace({})  # no store at all: nothing to do

    @pytest.mark.parametrize(
        ("type_name", "match"),
        [
            ("os.system", "not on the trusted-module allowlist"),  # never imported
            ("components.store.knowledge_collection.NoSuchStore", "cannot be imported"),
            ("components.store.schema.CollectionSchema", "is not a KnowledgeStore"),  # importable, not a store
            ("haystack.dataclasses.Document", "is not a KnowledgeStore"),
        ],
    )
    def test_a_type_that_is_not_an_allowed_store_is_refused(self, type_name, match):
        with pytest.raises(DeserializationError, match=match):
            deserialize_store_inplace({"collection": {"type": type_name, "init_parameters": {}}})
