"""Load pipeline YAML files through Haystack's deserialization allowlist, with deployment overrides."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline

from pipelines.settings import ALLOWED_MODULES, Deployment


def apply_overrides(
    data: dict[str, Any], deployment: Deployment, component_params: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """
    Return a copy of a serialized pipeline with deployment values and per-component parameters applied.

    Deployment values (Milvus `uri`, knowledge `index_path`, trace `database_url`) are set on every component that
    has that init parameter; `component_params` set named parameters of named components.

    :param data: The pipeline as a dict (from YAML).
    :param deployment: The resolved deployment.
    :param component_params: `{component_name: {param: value}}`.
    :returns: The updated copy.
    :raises ValueError: If `component_params` names an unknown component.
    """
    data = copy.deepcopy(data)
    components = data.get("components") or {}
    for spec in components.values():
        params = spec.setdefault("init_parameters", {})
        for key, value in deployment.overrides().items():
            if key in params:
                params[key] = value
    for name, params in (component_params or {}).items():
        if name not in components:
            msg = f"component_params names {name!r}, which is not a component of the pipeline ({sorted(components)})"
            raise ValueError(msg)
        components[name].setdefault("init_parameters", {}).update(params)
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
    :raises ValueError: If the file is not a pipeline mapping.
    """
    text = Path(path).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or "components" not in data:
        msg = f"{path} is not a Haystack pipeline file (no 'components' mapping)"
        raise ValueError(msg)
    return Pipeline.from_dict(
        apply_overrides(data, deployment, component_params), allowed_modules=list(ALLOWED_MODULES)
    )
