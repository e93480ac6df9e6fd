"""`VectorTable`: the active chunks' vectors as the index run read them, in a memory-mapped file beside the index."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

#: how the table files are named, in the folder of the knowledge index file
FILE_PREFIX = "knowledge_vectors-"
ID_FIELD = "id"


class VectorTable:
    """
    Every active chunk's vectors by chunk id, read from a NumPy file that `lookup-knowledge index` writes.

    Language balancing needs the vectors of each lookup's candidates. Read with the search, Milvus sends them as
    lists of floats that the client decodes one by one (about 900 per candidate); read from this table, they are rows
    of a memory-mapped array, so a lookup touches only the pages of its own candidates, and opening the table costs
    its ids, whatever the collection's size. The index run writes a table of a new name each time and records the
    name in the index file, so a table is always the one of the index version that names it.

    ### Usage example

    ```python
    from components.store.vector_table import VectorTable, table_rows

    rows = table_rows([("c1", {"vector": v1}), ("c2", {"vector": v2})], {"vector": 384})
    name = VectorTable.write("data", [rows])
    table = VectorTable.open("data", name)
    vectors = table.vectors(["c1", "c2"], "vector")
    ```
    """

    def __init__(self, rows: np.ndarray) -> None:
        """
        :param rows: A structured array with an `id` column and one float32 column per vector field.
        """
        self._rows = rows
        self._positions = {str(chunk_id): i for i, chunk_id in enumerate(rows[ID_FIELD].tolist())}
        self._fields = {name: int(dtype.shape[0]) for name, dtype in _vector_columns(rows.dtype)}

    @property
    def fields(self) -> dict[str, int]:
        """The vector fields held, with their dimensions."""
        return dict(self._fields)

    def __len__(self) -> int:
        return len(self._positions)

    def vectors(self, ids: Sequence[str], field: str) -> dict[str, np.ndarray]:
        """
        The vectors of one field for the ids the table holds.

        :param ids: Chunk ids.
        :param field: A vector field of the table.
        :returns: Vector (float32) per id found; ids the table does not hold are left out.
        :raises KeyError: If the table has no such field.
        """
        if field not in self._fields:
            msg = f"the vector table holds {sorted(self._fields)}, not {field!r}"
            raise KeyError(msg)
        found = [(i, self._positions[i]) for i in ids if i in self._positions]
        if not found:
            return {}
        column = self._rows[field][[position for _, position in found]]
        return {chunk_id: column[n] for n, (chunk_id, _) in enumerate(found)}

    @classmethod
    def open(cls, folder: str | Path, name: str) -> VectorTable:
        """
        Open a table file (memory-mapped: vectors are read from disk as lookups touch them).

        :param folder: The knowledge index file's folder.
        :param name: The file's name as `write` returned it (the index file records it).
        :returns: The table.
        :raises ValueError: If the name is not a table's name in that folder, or the file is not a vector table
            (missing, damaged, truncated, or another file).
        """
        path = Path(folder) / name
        if Path(name).name != name or not name.startswith(FILE_PREFIX) or not name.endswith(".npy"):
            msg = f"{name!r} is not the name of a vector table ({FILE_PREFIX}<id>.npy in {folder})"
            raise ValueError(msg)
        if path.is_symlink():
            msg = f"{path} is a link; a vector table is a file of the data folder: run `lookup-knowledge index`"
            raise ValueError(msg)
        try:
            rows = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError) as err:
            msg = f"{path} is not a readable vector table ({err}); run `lookup-knowledge index` to write it again"
            raise ValueError(msg) from err
        columns = rows.dtype.names or ()
        fix = "run `lookup-knowledge index` to write it again"
        if rows.ndim != 1 or ID_FIELD not in columns or not _vector_columns(rows.dtype):
            msg = f"{path} is not a vector table (columns {list(columns)}); {fix}"
            raise ValueError(msg)
        for column, dtype in _vector_columns(rows.dtype):
            if dtype.base != np.float32 or len(dtype.shape) != 1:
                msg = f"{path}: column {column!r} is not a float32 vector; {fix}"
                raise ValueError(msg)
        return cls(rows)

    @staticmethod
    def write(folder: str | Path, parts: Sequence[np.ndarray]) -> str:
        """
        Write a table of a new name into a folder, atomically: a reader sees the whole file or none.

        :param folder: Where (the knowledge index file's folder).
        :param parts: Rows as `table_rows` makes them, a batch each (all of the same fields).
        :returns: The file's name, to be recorded in the index file.
        :raises ValueError: If there are no rows, or the parts do not have the same vector fields.
        """
        if not any(len(part) for part in parts):
            msg = "a vector table needs at least one row"
            raise ValueError(msg)
        fields = {name: int(dtype.shape[0]) for name, dtype in _vector_columns(parts[0].dtype)}
        if any({n: int(d.shape[0]) for n, d in _vector_columns(p.dtype)} != fields for p in parts):
            msg = "every part of a vector table must have the same vector fields"
            raise ValueError(msg)
        longest = max((part.dtype[ID_FIELD].itemsize // 4 for part in parts), default=1)
        dtype = _dtype(fields, longest)
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        name = f"{FILE_PREFIX}{uuid.uuid4().hex[:12]}.npy"
        partial = folder / f".{name}.partial"
        rows = np.lib.format.open_memmap(partial, mode="w+", dtype=dtype, shape=(sum(len(p) for p in parts),))
        start = 0
        for part in parts:
            rows[start : start + len(part)] = part.astype(dtype)
            start += len(part)
        rows.flush()
        del rows
        os.replace(partial, folder / name)
        return name

    @staticmethod
    def remove_others(folder: str | Path, keep: str | None) -> int:
        """
        Delete the table files of earlier index runs (a reader that has one open keeps reading it).

        :param folder: The knowledge index file's folder.
        :param keep: The current table's name (None: delete every table); unfinished writes are deleted too.
        :returns: How many files were deleted.
        """
        removed = 0
        for path in [*Path(folder).glob(f"{FILE_PREFIX}*.npy"), *Path(folder).glob(f".{FILE_PREFIX}*.partial")]:
            if path.name != keep:
                path.unlink(missing_ok=True)
                removed += 1
        return removed


def _dtype(fields: Mapping[str, int], id_chars: int) -> np.dtype:
    return np.dtype([(ID_FIELD, f"<U{id_chars}"), *((name, "<f4", (dim,)) for name, dim in fields.items())])


def table_rows(batch: Sequence[tuple[str, Mapping[str, Sequence[float]]]], fields: Mapping[str, int]) -> np.ndarray:
    """
    One batch of chunks as rows of a table (float32, ids as long as the batch's longest), for `VectorTable.write`.

    :param batch: `(chunk id, {field: vector})` pairs, every field present in every row.
    :param fields: The vector fields and their dimensions.
    :returns: The rows.
    :raises ValueError: If a vector does not have its field's dimension.
    """
    part = np.zeros(len(batch), dtype=_dtype(fields, max((len(chunk_id) for chunk_id, _ in batch), default=1)))
    part[ID_FIELD] = [chunk_id for chunk_id, _ in batch]
    for name, dim in fields.items():
        column = np.asarray([vectors[name] for _, vectors in batch], dtype=np.float32)
        if column.shape != (len(batch), dim):
            msg = f"vectors of {name!r} must have {dim} dimensions, got shape {column.shape[1:]}"
            raise ValueError(msg)
        part[name] = column
    return part


def _vector_columns(dtype: np.dtype) -> list[tuple[str, np.dtype]]:
    return [(name, dtype[name]) for name in dtype.names or () if name != ID_FIELD]
