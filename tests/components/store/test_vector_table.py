from __future__ import annotations

import numpy as np
import pytest

from components.store.vector_table import FILE_PREFIX, VectorTable, table_rows

FIELDS = {"vector": 4, "crosslingual": 3}


def rows(ids: list[str], seed: int = 0) -> list[tuple[str, dict[str, list[float]]]]:
    rng = np.random.default_rng(seed)
    return [(i, {name: rng.normal(size=dim).tolist() for name, dim in FIELDS.items()}) for i in ids]


class TestVectorTable:
    def test_written_vectors_are_read_back_by_id_as_float32(self, tmp_path):
        first, second = rows(["a", "bb"]), rows(["a-much-longer-chunk-id"], seed=1)
        name = VectorTable.write(tmp_path, [table_rows(first, FIELDS), table_rows(second, FIELDS)])
        table = VectorTable.open(tmp_path, name)
        assert name.startswith(FILE_PREFIX) and len(table) == 3 and table.fields == FIELDS
        for chunk_id, vectors in [*first, *second]:
            for field, vector in vectors.items():
                read = table.vectors([chunk_id], field)[chunk_id]
                assert read.dtype == np.float32
                assert read.tolist() == np.asarray(vector, dtype=np.float32).tolist()

    def test_ids_it_does_not_hold_are_left_out_and_order_follows_the_ids(self, tmp_path):
        table = VectorTable.open(tmp_path, VectorTable.write(tmp_path, [table_rows(rows(["a", "b", "c"]), FIELDS)]))
        assert list(table.vectors(["c", "missing", "a"], "vector")) == ["c", "a"]
        assert table.vectors(["missing"], "vector") == {}
        assert table.vectors([], "vector") == {}

    def test_an_unknown_field_is_a_key_error_naming_the_fields(self, tmp_path):
        table = VectorTable.open(tmp_path, VectorTable.write(tmp_path, [table_rows(rows(["a"]), FIELDS)]))
        with pytest.raises(KeyError, match="crosslingual"):
            table.vectors(["a"], "sparse")

    def test_each_write_is_a_new_file_and_remove_others_keeps_the_named_one(self, tmp_path):
        parts = [table_rows(rows(["a"]), FIELDS)]
        old, new = VectorTable.write(tmp_path, parts), VectorTable.write(tmp_path, parts)
        (tmp_path / f".{FILE_PREFIX}crashed.npy.partial").write_bytes(b"half")
        (tmp_path / "knowledge_index.json").write_text("{}")
        assert old != new
        assert VectorTable.remove_others(tmp_path, new) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([new, "knowledge_index.json"])

    def test_a_wrong_dimension_is_refused_before_anything_is_written(self, tmp_path):
        bad = [("a", {"vector": [1.0, 2.0], "crosslingual": [0.0, 0.0, 0.0]})]
        with pytest.raises(ValueError, match="'vector' must have 4 dimensions"):
            table_rows(bad, FIELDS)
        with pytest.raises(ValueError, match="at least one row"):
            VectorTable.write(tmp_path, [])
        assert list(tmp_path.iterdir()) == []

    @pytest.mark.parametrize(
        "damage",
        [
            lambda p: p.write_bytes(p.read_bytes()[:200]),  # truncated
            lambda p: p.write_bytes(b"not numpy at all"),
            lambda p: np.save(p, np.arange(6, dtype=np.float32)),  # a NumPy file, not a table
            lambda p: p.unlink(),
        ],
        ids=["truncated", "garbage", "plain-array", "missing"],
    )
    def test_a_damaged_or_missing_file_is_a_clear_error(self, tmp_path, damage):
        name = VectorTable.write(tmp_path, [table_rows(rows(["a", "b"]), FIELDS)])
        damage(tmp_path / name)
        with pytest.raises(ValueError, match="lookup-knowledge index"):
            VectorTable.open(tmp_path, name)

    @pytest.mark.parametrize("name", ["../knowledge_vectors-x.npy", "other.npy", f"{FILE_PREFIX}x.json", "/etc/x"])
    def test_only_a_table_name_in_the_folder_is_opened(self, tmp_path, name):
        with pytest.raises(ValueError, match="is not the name of a vector table"):
            VectorTable.open(tmp_path, name)

    def test_a_link_is_refused(self, tmp_path):
        elsewhere = tmp_path / "elsewhere"
        name = VectorTable.write(elsewhere, [table_rows(rows(["a"]), FIELDS)])
        data = tmp_path / "data"
        data.mkdir()
        (data / name).symlink_to(elsewhere / name)
        with pytest.raises(ValueError, match="is a link"):
            VectorTable.open(data, name)
