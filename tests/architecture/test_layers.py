"""The import graph says what each layer may use: the review of issue 29, as a test that fails when a layer reaches past
another (read off the source with `ast`, nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MILVUS_PACKAGES = ("pymilvus", "milvus_haystack", "milvus_lite", "milvus")
#: what a pipeline node may import of this project: what every layer shares, the store, and the trace store
NODE_MAY_IMPORT = ("components.core", "components.store", "components.trace.")
#: the trace package's own plumbing, which nodes share (the recorder and the session filter read and write through it)
TRACE_NODES = {"components/trace/trace_recorder.py"}
NODE_FOLDERS = (
    "converters",
    "preprocessors",
    "embedders",
    "writers",
    "query",
    "retrievers",
    "rankers",
    "joiners",
    "evidence",
)


def _modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py") if "migrations" not in p.parts)


def _imports(path: Path) -> list[str]:
    """Every module a file imports, at any depth of the file (lazy imports inside functions included)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def _nodes() -> list[Path]:
    folders = [f"components/{name}" for name in NODE_FOLDERS]
    return [p for p in _modules(*folders) if p.name != "__init__.py"] + [REPO / t for t in sorted(TRACE_NODES)]


class TestLayers:
    def test_milvus_is_imported_only_under_the_store_folder(self):
        offenders = {
            _rel(path): name
            for path in _modules("components", "pipelines", "hayhooks")
            if not _rel(path).startswith("components/store/")
            for name in _imports(path)
            if name.split(".")[0] in MILVUS_PACKAGES
        }
        assert offenders == {}

    def test_no_class_or_function_outside_the_store_is_named_after_milvus(self):
        named = [
            f"{_rel(path)}:{node.name}"
            for path in _modules("components", "pipelines", "hayhooks")
            if not _rel(path).startswith("components/store/")
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ClassDef | ast.FunctionDef) and "milvus" in node.name.lower()
        ]
        assert named == []

    def test_no_node_imports_another_node(self):
        node_modules = {_rel(p)[: -len(".py")].replace("/", ".") for p in _nodes()}
        offenders = {
            _rel(path): name
            for path in _nodes()
            for name in _imports(path)
            if name.startswith("components.")
            and (not name.startswith(NODE_MAY_IMPORT) or any(name.startswith(m) for m in node_modules))
            and not name.startswith(_rel(path)[: -len(".py")].replace("/", "."))  # its own usage example
        }
        assert offenders == {}

    def test_components_never_import_the_pipelines(self):
        offenders = {
            _rel(path): name
            for path in _modules("components")
            for name in _imports(path)
            if name.startswith("pipelines")
        }
        assert offenders == {}

    @pytest.mark.parametrize("folder", ["pipelines/entrypoints", "hayhooks"])
    def test_entry_points_reach_nodes_and_stores_only_through_the_library(self, folder):
        """Entry points use `pipelines.*` (the service, indexing, settings) and the shared contract only."""
        offenders = {
            _rel(path): name
            for path in _modules(folder)
            for name in _imports(path)
            if name.startswith("components.") and not name.startswith("components.core")
        }
        assert offenders == {}

    def test_the_environment_is_read_in_one_module(self):
        """`components/core/environment.py` names every variable; nothing else reads or sets one."""

        def reads(tree: ast.AST) -> list[str]:
            found = []
            for node in ast.walk(tree):
                target = (
                    node.func if isinstance(node, ast.Call) else node.value if isinstance(node, ast.Subscript) else None
                )
                text = ast.unparse(target) if target is not None else ""
                if text in ("os.getenv", "os.environ.get", "os.environ.setdefault", "os.environ.pop", "os.environ"):
                    found.append(text)
            return found

        offenders = {
            _rel(path): found
            for path in _modules("components", "pipelines", "hayhooks")
            if _rel(path) != "components/core/environment.py"
            and (found := reads(ast.parse(path.read_text(encoding="utf-8"))))
        }
        assert offenders == {}
