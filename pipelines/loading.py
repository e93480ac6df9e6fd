"""Load pipeline YAML files through Haystack's deserialization allowlist, with deployment overrides.

The file is read within bounds first (`pipelines.pipeline_file`): nothing is built from a file that would cost more
than any pipeline needs.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, TypeVar

from haystack import Pipeline
from haystack.core.errors import DeserializationError

from pipelines.pipeline_file import read_pipeline_file
from pipelines.settings import ALLOWED_MODULES, Deployment

T = TypeVar("T")


def _is_serialized_object(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and "init_parameters" in value


def _is_parameters(value: Any) -> bool:
    return isinstance(value, dict) and not _is_serialized_object(value)


def _apply_deployment(params: dict[str, Any], values: dict[str, str]) -> None:
    """Set the deployment's values on these init parameters and on every nested object's (e.g. a collection)."""
    for key, value in values.items():
        if key in params:
            params[key] = value
    for nested in params.values():
        if _is_serialized_object(nested):
            _apply_deployment(nested["init_parameters"], values)


def _merge(params: dict[str, Any], changes: dict[str, Any]) -> None:
    """Merge overrides into init parameters; a dict given for a nested object changes that object's parameters."""
    for key, value in changes.items():
        current = params.get(key)
        # a dict of parameters changes a nested object's; a whole serialized object replaces it
        if isinstance(current, dict) and _is_serialized_object(current) and _is_parameters(value):
            _merge(current["init_parameters"], value)
        else:
            params[key] = value


def apply_overrides(
    data: dict[str, Any], deployment: Deployment, component_params: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """
    Return a copy of a serialized pipeline with deployment values and per-component parameters applied.

    Deployment values (Milvus `uri`, knowledge `index_path`, trace `database_url` and `spool_path`) are set on every
    component, and every object nested in a component (such as a `KnowledgeCollection`), that has that init
    parameter. `component_params` set named parameters of named components; a dict given for a nested object's
    parameter changes that object's parameters (e.g. `{"retriever": {"collection": {"collection_name": "x"}}}`).

    :param data: The pipeline as a dict (from YAML).
    :param deployment: The resolved deployment.
    :param component_params: `{component_name: {param: value}}`.
    :returns: The updated copy.
    :raises ValueError: If `component_params` names an unknown component.
    """
    data = copy.deepcopy(data)
    # one copy per component: a YAML alias (the sidecar's `collection: *collection`) must not tie two components
    components = {name: copy.deepcopy(spec) for name, spec in (data.get("components") or {}).items()}
    data["components"] = components
    for spec in components.values():
        _apply_deployment(spec.setdefault("init_parameters", {}), deployment.overrides())
    for name, params in (component_params or {}).items():
        if name not in components:
            msg = f"component_params names {name!r}, which is not a component of the pipeline ({sorted(components)})"
            raise ValueError(msg)
        _merge(components[name].setdefault("init_parameters", {}), copy.deepcopy(params))
    return data


def load_pipeline_file(
    path: str | Path, deployment: Deployment, component_params: dict[str, dict[str, Any]] | None = None
) -> Pipeline:
    """
    Load a pipeline YAML file with the deserialization allowlist (never unsafe loading).

    :param path: The YAML file.
    :param deployment: The deployment whose data folder, Milvus URI and trace database the pipeline uses.
    :param component_params: Per-component init parameter overrides.
    :returns: The pipeline (not yet warmed up).
    :raises FileNotFoundError: If the file does not exist.
    :raises ValueError: If the file is not a pipeline mapping, is refused by `check_pipeline_yaml` (too large, too
        deep, an alias bomb, not YAML), or a component does not load from it (an unknown parameter, a class outside
        the allowlist), in one line.
    """
    data = read_pipeline_file(path)
    try:
        return Pipeline.from_dict(
            apply_overrides(data, deployment, component_params), allowed_modules=list(ALLOWED_MODULES)
        )
    except DeserializationError as err:  # e.g. a parameter the component does not take: one line, as bad input
        cause = err.__cause__ or err
        msg = f"{path} does not load: {' '.join(str(cause).split())[:400]}"
        raise ValueError(msg) from err


def find_node(pipeline: Pipeline, cls: type) -> str | None:
    """
    Find the name of the one component of a type in a pipeline, if it has one.

    :param pipeline: The pipeline.
    :param cls: The component class.
    :returns: Its name, or None when the pipeline has none.
    :raises ValueError: If the pipeline has more than one.
    """
    names = [name for name, comp in pipeline.walk() if isinstance(comp, cls)]
    if len(names) > 1:
        msg = f"the pipeline must have at most one {cls.__name__}, it has {names}"
        raise ValueError(msg)
    return names[0] if names else None


def node_of_type(pipeline: Pipeline, cls: type[T]) -> tuple[str, T]:
    """
    Find the one component of a type in a pipeline, whatever its name in the YAML.

    :param pipeline: The pipeline.
    :param cls: The component class.
    :returns: The component's name and the component.
    :raises ValueError: If the pipeline has no such component, or more than one.
    """
    found = [(name, comp) for name, comp in pipeline.walk() if isinstance(comp, cls)]
    if len(found) != 1:
        names = [name for name, _ in found]
        msg = f"the pipeline must have exactly one {cls.__name__}, it has {len(found)} {names}"
        raise ValueError(msg)
    return found[0][0], found[0][1]


def parse_override(spec: str) -> tuple[str, str, Any]:
    """
    Read one `component.param=value` override (the value as JSON, or a bare string).

    :param spec: e.g. `retriever.top_k=30`, `fusion.lexical_normalization=best`, or for a nested object's
        parameter `sidecar.collection.collection_name=other`.
    :returns: The component, the parameter (dotted for a nested one) and the value.
    :raises ValueError: If the spec is not `component.param=value`.
    """
    key, sep, raw = spec.partition("=")
    component, dot, param = key.partition(".")
    if not (sep and dot and component and param) or "" in param.split("."):
        msg = f"override {spec!r} is not component.param=value; use e.g. retriever.top_k=30"
        raise ValueError(msg)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return component, param, value


def component_params_from(specs: list[str]) -> dict[str, dict[str, Any]]:
    """
    Turn `component.param=value` overrides into `component_params` for `load_pipeline`.

    :param specs: Overrides (`parse_override`); a dotted parameter sets a nested object's parameter.
    :returns: `{component: {param: value}}`, nested where the parameter was dotted.
    :raises ValueError: If a spec is malformed.
    """
    params: dict[str, dict[str, Any]] = {}
    for spec in specs:
        component, param, value = parse_override(spec)
        *path, last = param.split(".")
        target = params.setdefault(component, {})
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    return params
