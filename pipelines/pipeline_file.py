"""Read a pipeline YAML file within bounds, before anything is built from it (YAML only: no Haystack import).

A pipeline file is bounded before anything is built from it (`check_pipeline_yaml`): its size, its nesting and the
size it expands to through YAML aliases, so that a file of nested aliases (a "billion laughs") is refused in one
line at once instead of keeping Haystack busy for hours. The command line checks a `--pipeline` file this way before
it starts anything for the data folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: largest pipeline file read (`pipelines.yaml` is 8 KiB)
MAX_PIPELINE_BYTES = 1024 * 1024
#: most YAML nodes a pipeline file may expand to, aliases expanded (`pipelines.yaml` has 435)
MAX_PIPELINE_NODES = 20_000
#: deepest nesting of mappings and sequences in a pipeline file (`pipelines.yaml` nests 8 levels)
MAX_PIPELINE_DEPTH = 64

_COLLECTION_START = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
_COLLECTION_END = (yaml.MappingEndEvent, yaml.SequenceEndEvent)


def expanded_size(text: str, max_nodes: int = MAX_PIPELINE_NODES, max_depth: int = MAX_PIPELINE_DEPTH) -> int:
    """
    Count the nodes YAML text expands to, each alias as the nodes of what it refers to, on the event stream (before
    anything is built: ten nested levels of ten aliases each are 10^10 nodes in a 300-byte file).

    :param text: YAML text.
    :param max_nodes: Stop counting beyond this many nodes.
    :param max_depth: Deepest nesting accepted.
    :returns: The nodes, or a number over `max_nodes` as soon as the count passes it.
    :raises ValueError: If the text nests deeper than `max_depth`.
    :raises yaml.YAMLError: If it is not YAML.
    """
    anchored: dict[str, int] = {}  # anchor -> nodes of its expanded node
    open_collections: list[tuple[str | None, int]] = []  # (anchor, count before the collection started)
    nodes = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            nodes += anchored.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                anchored[event.anchor] = 1
        elif isinstance(event, _COLLECTION_START):
            open_collections.append((event.anchor, nodes))
            nodes += 1
            if len(open_collections) > max_depth:
                msg = f"nests deeper than {max_depth} levels of mappings and sequences"
                raise ValueError(msg)
        elif isinstance(event, _COLLECTION_END):
            anchor, before = open_collections.pop()
            if anchor:
                anchored[anchor] = nodes - before
        if nodes > max_nodes:
            break
    return nodes


def _check_size(size: int, source: str | Path) -> None:
    if size > MAX_PIPELINE_BYTES:
        msg = f"{source} is {size} bytes, over the {MAX_PIPELINE_BYTES}-byte cap of a pipeline file"
        raise ValueError(msg)


def check_pipeline_yaml(text: str, source: str | Path = "the pipeline file") -> None:
    """
    Refuse a pipeline file that would cost more to build than any pipeline needs, before anything is built.

    :param text: The file's text.
    :param source: Its name, for the message.
    :raises ValueError: In one line, if it is over `MAX_PIPELINE_BYTES`, nests deeper than `MAX_PIPELINE_DEPTH`,
        expands to more than `MAX_PIPELINE_NODES` nodes through its aliases, or is not YAML.
    """
    _check_size(len(text.encode("utf-8", errors="surrogatepass")), source)
    try:
        nodes = expanded_size(text)
    except yaml.YAMLError as err:
        msg = f"{source} is not valid YAML: {' '.join(str(err).split())}"
        raise ValueError(msg) from None
    except ValueError as err:
        msg = f"{source} {err}; a pipeline nests a few"
        raise ValueError(msg) from None
    if nodes > MAX_PIPELINE_NODES:
        msg = (
            f"{source} expands to more than {MAX_PIPELINE_NODES} YAML nodes through its aliases (nested aliases, a "
            f"'billion laughs'?); a pipeline needs a few hundred: remove the nested aliases"
        )
        raise ValueError(msg)


def read_pipeline_file(path: str | Path) -> dict[str, Any]:
    """
    Read a pipeline YAML file within bounds.

    :param path: The YAML file.
    :returns: The pipeline as a dict (its `components` mapping and the rest, as written).
    :raises FileNotFoundError: If the file does not exist.
    :raises ValueError: If the file is not a pipeline mapping, or is refused by `check_pipeline_yaml` (too large, too
        deep, an alias bomb, not YAML).
    """
    _check_size(Path(path).stat().st_size, path)  # before reading it
    text = Path(path).read_text(encoding="utf-8")
    check_pipeline_yaml(text, path)
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or "components" not in data:
        msg = f"{path} is not a Haystack pipeline file (no 'components' mapping)"
        raise ValueError(msg)
    return data
