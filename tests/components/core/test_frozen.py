from __future__ import annotations

import copy
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.core.pipeline.utils import _deepcopy_with_exceptions

from components.core.frozen import Documents, FrozenDict, FrozenList, Record


@component
class _Emitter:
    """Emits the value it was given, as the named type."""

    def __init__(self, frozen: bool) -> None:
        self.frozen = frozen
        self.sent: dict[str, Any] = {}

    @component.output_types(documents=FrozenList[Document], trace=FrozenDict)
    def run(self, text: str) -> dict[str, Any]:
        documents = [Document(content=text, meta={"rank": 1})]
        trace = {"attempts": [{"hits": 1}]}
        self.sent = {
            "documents": FrozenList(documents) if self.frozen else documents,
            "trace": FrozenDict(trace) if self.frozen else trace,
        }
        return self.sent


@component
class _ListEmitter:
    """A component as Haystack's own are: a plain list of Documents."""

    @component.output_types(documents=list[Document])
    def run(self, text: str) -> dict[str, Any]:
        return {"documents": [Document(content=text)]}


@component
class _Receiver:
    """Keeps what it received."""

    def __init__(self) -> None:
        self.received: dict[str, Any] = {}

    @component.output_types(count=int)
    def run(self, documents: Documents, trace: Record | None = None) -> dict[str, Any]:
        self.received = {"documents": documents, "trace": trace}
        return {"count": len(documents)}


class TestFrozenList:
    def test_reads_like_a_list(self):
        docs = [Document(content="a"), Document(content="b"), Document(content="c")]
        frozen = FrozenList(docs)
        assert len(frozen) == 3 and frozen[1] is docs[1] and list(frozen) == docs
        assert frozen[:2] == docs[:2] and isinstance(frozen[:2], FrozenList)
        assert frozen == docs and frozen == tuple(docs) and frozen != docs[:2] and frozen != "abc"
        assert frozen.to_list() == docs and frozen.to_list() is not frozen.to_list()
        assert not FrozenList() and FrozenList() == []
        assert sorted(FrozenList([3, 1, 2])) == [1, 2, 3]

    def test_cannot_change(self):
        frozen = FrozenList([1, 2])
        with pytest.raises(TypeError):
            frozen[0] = 3  # type: ignore[index]
        with pytest.raises(AttributeError):
            frozen.append(3)  # type: ignore[attr-defined]
        with pytest.raises(TypeError):
            hash(frozen)

    def test_a_copy_is_the_value_itself(self):
        frozen = FrozenList([Document(content="a")])
        assert copy.deepcopy(frozen) is frozen and copy.copy(frozen) is frozen
        assert _deepcopy_with_exceptions({"documents": frozen})["documents"] is frozen

    def test_empty_input_gives_an_empty_list(self):
        assert len(FrozenList()) == 0 and FrozenList(iter([])) == []


class TestFrozenDict:
    def test_reads_like_a_dict(self):
        frozen = FrozenDict({"a": 1, "b": [2]})
        assert frozen["a"] == 1 and frozen.get("c") is None and set(frozen) == {"a", "b"} and len(frozen) == 2
        assert frozen == {"a": 1, "b": [2]} and {**frozen, "c": 3} == {"a": 1, "b": [2], "c": 3}
        assert frozen.to_dict() == {"a": 1, "b": [2]} and type(frozen.to_dict()) is dict
        assert FrozenDict() == {} and not FrozenDict(None)

    def test_cannot_change_and_does_not_follow_the_callers_dict(self):
        source = {"a": 1}
        frozen = FrozenDict(source)
        source["a"] = 2
        assert frozen["a"] == 1
        with pytest.raises(TypeError):
            frozen["a"] = 3  # type: ignore[index]

    def test_a_copy_is_the_value_itself(self):
        frozen = FrozenDict({"attempts": [{"hits": 1}]})
        assert copy.deepcopy(frozen) is frozen and copy.copy(frozen) is frozen
        assert _deepcopy_with_exceptions({"trace": frozen})["trace"] is frozen


def _wired(emitter: Any, receiver: _Receiver, sockets: tuple[str, ...] = ("documents", "trace")) -> Pipeline:
    pipeline = Pipeline()
    pipeline.add_component("emitter", emitter)
    pipeline.add_component("receiver", receiver)
    for socket in sockets:
        pipeline.connect(f"emitter.{socket}", f"receiver.{socket}")
    return pipeline


@pytest.mark.integration
class TestHandOffInAPipeline:
    def test_a_pipeline_hands_frozen_values_on_without_copying_them(self):
        emitter, receiver = _Emitter(frozen=True), _Receiver()
        assert _wired(emitter, receiver).run({"emitter": {"text": "disk full"}}) == {"receiver": {"count": 1}}
        assert receiver.received["documents"] is emitter.sent["documents"]
        assert receiver.received["trace"] is emitter.sent["trace"]

    def test_a_plain_list_and_dict_are_copied_as_before(self):
        # what the frozen values save: the same connection with plain values hands on copies
        emitter, receiver = _Emitter(frozen=False), _Receiver()
        _wired(emitter, receiver).run({"emitter": {"text": "disk full"}})
        assert receiver.received["documents"] is not emitter.sent["documents"]
        assert receiver.received["documents"][0] is not emitter.sent["documents"][0]
        assert receiver.received["trace"] == emitter.sent["trace"]

    def test_haystack_components_lists_connect_to_our_inputs(self):
        pipeline = _wired(_ListEmitter(), _Receiver(), sockets=("documents",))
        assert pipeline.run({"emitter": {"text": "disk full"}}) == {"receiver": {"count": 1}}
