"""An immutable query embedding, which a Haystack pipeline passes on as one value."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class QueryVector(Sequence[float]):
    """
    A query's embedding that cannot change, so that passing it on costs nothing.

    `Pipeline.run` deep-copies every input of every component, a list element by element, each element checked
    against Haystack's `Component` protocol: a 384-float list costs milliseconds per copy
    (`python benchmarks/haystack_copies.py`). A copy of an immutable value is the value itself, so this one is handed
    on as is. It reads like a `list[float]` (length, indexing, iteration); `to_list()` gives one.

    ### Usage example

    ```python
    from components.core.query_vector import QueryVector

    vector = QueryVector((0.6, 0.8), model="multilingual-e5-small")
    print(len(vector), vector.to_list())  # 2 [0.6, 0.8]
    ```
    """

    values: tuple[float, ...]
    model: str = ""

    def __deepcopy__(self, memo: dict[int, Any]) -> QueryVector:
        return self

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, index: Any) -> Any:
        return self.values[index]

    def __iter__(self) -> Iterator[float]:
        return iter(self.values)

    def to_list(self) -> list[float]:
        """:returns: The values as a list (what Milvus and NumPy take)."""
        return list(self.values)


def as_list(vector: Sequence[float] | None) -> list[float]:
    """
    :param vector: A `list[float]` (any Haystack text embedder's), a `QueryVector`, or None.
    :returns: The values as a list; empty for None.
    """
    if vector is None:
        return []
    return vector.to_list() if isinstance(vector, QueryVector) else list(vector)
