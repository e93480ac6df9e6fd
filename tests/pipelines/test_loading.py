from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from haystack import Pipeline

from components.retrievers.filtered_retry_retriever import FilteredRetryRetriever
from components.retrievers.sidecar_retriever import SidecarRetriever
from components.trace.trace_recorder import TraceRecorder
from pipelines import load_pipeline, lookup
from pipelines.loading import (
    apply_overrides,
    component_params_from,
    find_node,
    load_pipeline_file,
    node_of_type,
    parse_override,
)
from pipelines.pipeline_file import MAX_PIPELINE_NODES, check_pipeline_yaml, expanded_size
from pipelines.settings import DEFAULT_LOOKUP_PIPELINE, REPO_ROOT, Deployment
from tests.conftest import index_tiny_kb


def shipped() -> dict:
    return yaml.safe_load(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"))


def alias_bomb(levels: int) -> str:
    """A pipeline file whose one parameter is `levels` nested levels of ten aliases each: 10^levels nodes."""
    lines = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"lol{i}: &lol{i} [{', '.join([f'*lol{i - 1}'] * 10)}]" for i in range(1, levels)]
    component = "    type: components.query.query_transformer.QueryTransformer\n"
    params = f"    init_parameters: {{max_query_chars: *lol{levels - 1}}}\n"
    return "\n".join(lines) + "\ncomponents:\n  transformer:\n" + component + params + "connections: []\n"


class TestPipelineFileBounds:
    def test_an_alias_bomb_is_refused_at_once(self, tmp_path):
        deployment = Deployment.resolve(tmp_path / "data")
        for levels in (5, 10):  # 10^5 nodes took Haystack 2 s to build, 10^10 would take hours
            bomb = tmp_path / f"bomb{levels}.yaml"
            bomb.write_text(alias_bomb(levels), encoding="utf-8")
            started = time.monotonic()
            with pytest.raises(ValueError, match=f"expands to more than {MAX_PIPELINE_NODES} YAML nodes"):
                load_pipeline_file(bomb, deployment)
            assert time.monotonic() - started < 1

    def test_aliases_are_counted_as_what_they_expand_to(self):
        # the mapping, its three keys, and three times the sequence [x, y] (itself and two scalars)
        assert expanded_size("a: &a [x, y]\nb: *a\nc: *a\n") == 1 + 3 + 3 * 3
        assert expanded_size(alias_bomb(3)) > 1000
        shipped_size = expanded_size(DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8"))  # its one alias included
        assert shipped_size < MAX_PIPELINE_NODES / 10

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            ("components: " + "[" * 100 + "]" * 100, "nests deeper than 64 levels"),
            ("components: {a: [\n", "is not valid YAML"),
            ("components: " + "x" * (1024 * 1024), "over the 1048576-byte cap"),
        ],
    )
    def test_a_file_too_deep_too_large_or_not_yaml_is_refused_in_one_line(self, text, reason):
        with pytest.raises(ValueError, match=reason) as refused:
            check_pipeline_yaml(text, "p.yaml")
        assert "\n" not in str(refused.value) and str(refused.value).startswith("p.yaml ")


class TestApplyOverrides:
    def test_deployment_values_reach_nested_collections(self, tmp_path):
        deployment = Deployment.resolve(tmp_path, milvus_uri="http://127.0.0.1:19530")
        data = apply_overrides(shipped(), deployment)
        for name in ("retriever", "sidecar"):
            collection = data["components"][name]["init_parameters"]["collection"]["init_parameters"]
            assert collection["uri"] == "http://127.0.0.1:19530"
            assert collection["index_path"] == str(deployment.index_path)
        assert data["components"]["recorder"]["init_parameters"]["database_url"] == deployment.trace_db_url

    def test_a_dict_for_a_nested_object_changes_only_that_object(self, tmp_path):
        data = apply_overrides(
            shipped(),
            Deployment.resolve(tmp_path),
            {"sidecar": {"collection": {"collection_name": "other"}, "enabled": True}},
        )
        sidecar = data["components"]["sidecar"]["init_parameters"]
        retriever = data["components"]["retriever"]["init_parameters"]
        assert sidecar["collection"]["init_parameters"]["collection_name"] == "other"
        assert sidecar["collection"]["init_parameters"]["uri"]  # the rest of the nested object stays
        assert sidecar["enabled"] is True
        # the YAML alias `collection: *collection` must not tie the retriever's collection to the sidecar's
        assert "collection_name" not in retriever["collection"]["init_parameters"]

    def test_the_input_is_not_mutated(self, tmp_path):
        data = shipped()
        before = yaml.safe_dump(data)
        apply_overrides(data, Deployment.resolve(tmp_path), {"retriever": {"top_k": 3}})
        assert yaml.safe_dump(data) == before

    def test_an_unknown_component_is_named(self, tmp_path):
        with pytest.raises(ValueError, match="'retreiver'"):
            apply_overrides(shipped(), Deployment.resolve(tmp_path), {"retreiver": {"top_k": 3}})


class TestOverrideSpecs:
    @pytest.mark.parametrize(
        ("specs", "expected"),
        [
            (["retriever.top_k=30"], {"retriever": {"top_k": 30}}),
            (
                ["sidecar.enabled=true", "sidecar.collection.collection_name=other"],
                {"sidecar": {"enabled": True, "collection": {"collection_name": "other"}}},
            ),
            ([], {}),
        ],
    )
    def test_component_params_from_specs(self, specs, expected):
        assert component_params_from(specs) == expected

    @pytest.mark.parametrize("spec", ["sidecar.collection.=x", "a..b=1"])
    def test_empty_path_parts_are_rejected(self, spec):
        with pytest.raises(ValueError, match=r"component\.param=value"):
            parse_override(spec)


class TestNodes:
    def test_nodes_are_found_by_type(self, tmp_path):
        pipeline = load_pipeline_file(DEFAULT_LOOKUP_PIPELINE, Deployment.resolve(tmp_path))
        name, retriever = node_of_type(pipeline, FilteredRetryRetriever)
        assert name == "retriever" and isinstance(retriever, FilteredRetryRetriever)
        assert find_node(pipeline, SidecarRetriever) == "sidecar"
        pipeline.remove_component("sidecar")
        assert find_node(pipeline, SidecarRetriever) is None
        with pytest.raises(ValueError, match="exactly one SidecarRetriever, it has 0"):
            node_of_type(pipeline, SidecarRetriever)

    @pytest.mark.integration
    def test_a_pipeline_with_renamed_nodes_still_looks_up(self, tmp_path):
        data_dir = index_tiny_kb(tmp_path)
        text = DEFAULT_LOOKUP_PIPELINE.read_text(encoding="utf-8")
        for old, new in (("recorder", "audit"), ("query_transformer", "normalize"), ("retriever", "l1")):
            text = text.replace(f"\n  {old}:\n", f"\n  {new}:\n")
            text = text.replace(f"sender: {old}.", f"sender: {new}.").replace(f"receiver: {old}.", f"receiver: {new}.")
        renamed = tmp_path / "renamed.yaml"
        renamed.write_text(text, encoding="utf-8")
        pipeline = load_pipeline(renamed, data_dir=data_dir)
        assert node_of_type(pipeline, TraceRecorder)[0] == "audit"
        result = lookup(pipeline, "disk usage above 90 percent")
        assert result["found"] is True and result["traceId"]
        assert isinstance(Pipeline.loads(text, allowed_modules=["components"]), Pipeline)


def test_the_agent_tool_is_importable_from_pipelines_and_loads_only_when_asked():
    code = (
        "import sys, pipelines; assert 'pipelines.entrypoints.agent_tool' not in sys.modules; "
        "from pipelines import lookup_knowledge_tool; assert 'pipelines.entrypoints.agent_tool' in sys.modules; "
        "print(lookup_knowledge_tool.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "pipelines.entrypoints.agent_tool"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        import pipelines

        pipelines.nothing_here  # noqa: B018


def test_haystack_telemetry_is_off_in_every_entry_point_without_being_told(tmp_path):
    code = "import pipelines.entrypoints.cli, haystack.telemetry._telemetry as t; print(t.telemetry)"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
    assert not (Path(tmp_path) / ".haystack").exists()
