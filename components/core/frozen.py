"""Read-only containers that a Haystack pipeline hands from one component to the next as one value."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar, overload

from haystack import Document

T = TypeVar("T")


class FrozenList(Sequence[T], Generic[T]):
    """
    A read-only list that `Pipeline.run` passes on as itself instead of copying it item by item.

    Before every component runs, Haystack deep-copies each of its inputs, a list or dict leaf by leaf, checking each
    leaf against its runtime-checkable `Component` protocol: 60 candidate Documents cost milliseconds at every
    connection they cross (`python benchmarks/haystack_copies.py`). A copy of a `FrozenList` is the list itself. It
    holds what it was given, not copies: the components that pass one on never change the items they receive (they
    return changed copies), so there is nothing for the pipeline's copy to protect. It reads like a list (length,
    indexing, slicing, iteration, `==` with any sequence); `to_list()` gives a plain one.

    ### Usage example

    ```python
    from haystack import Document

    from components.core.frozen import FrozenList

    documents = FrozenList([Document(content="disk full"), Document(content="out of memory")])
    print(len(documents), documents[0].content, documents == list(documents))  # 2 disk full True
    ```
    """

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[T] = ()) -> None:
        """
        :param items: The items, in order (kept as they are, not copied).
        """
        self._items: tuple[T, ...] = tuple(items)

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenList[T]:
        return self

    def __copy__(self) -> FrozenList[T]:
        return self

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> FrozenList[T]: ...

    def __getitem__(self, index: int | slice) -> T | FrozenList[T]:
        if isinstance(index, slice):
            return FrozenList(self._items[index])
        return self._items[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return self._items == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to a list, which has no hash

    def __repr__(self) -> str:
        return f"FrozenList({list(self._items)!r})"

    def to_list(self) -> list[T]:
        """:returns: The items as a new list."""
        return list(self._items)


class FrozenDict(Mapping[str, Any]):
    """
    A read-only mapping that `Pipeline.run` passes on as itself instead of copying it value by value.

    For traces and results that a component hands on whole (a retrieval trace of a few hundred values costs about a
    millisecond per connection when Haystack copies it). Its values are plain JSON values, not copied and never
    changed by the components that receive them; `to_dict()` gives a plain dict (for a JSON column, say). It compares
    equal to a dict with the same items.

    ### Usage example

    ```python
    from components.core.frozen import FrozenDict

    trace = FrozenDict({"attempts": [], "fallback_reason": None})
    print(trace["attempts"], trace == {"attempts": [], "fallback_reason": None})  # [] True
    ```
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        """
        :param data: The items (the mapping is copied, its values are not).
        """
        self._data: dict[str, Any] = dict(data or {})

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict:
        return self

    def __copy__(self) -> FrozenDict:
        return self

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"FrozenDict({self._data!r})"

    def to_dict(self) -> dict[str, Any]:
        """:returns: The items as a new dict (the values themselves, not copies)."""
        return dict(self._data)


#: what our components take where a list of Documents comes in: any Haystack component's list, or our read-only one
Documents = list[Document] | FrozenList[Document]
#: what they take where a trace or result dict comes in
Record = dict[str, Any] | FrozenDict
#: what they take where a list of strings (chunk ids, say) comes in
Strings = list[str] | FrozenList[str]
