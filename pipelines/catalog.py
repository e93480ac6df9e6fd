"""Several knowledge bases in one deployment: each its own service (collection, index, calibration), by name.

`serve --knowledge NAME=DATA_DIR` (repeatable) serves each knowledge base through its own `KnowledgeService`; MCP gets
one lookup tool per knowledge base (`lookup_NAME`, described from its own facets), REST and the reads take a
`knowledge` name, and Dify's `knowledge_id` selects one. With one knowledge base nothing needs a name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from pipelines.entrypoints.dify_knowledge import DEFAULT_KNOWLEDGE_ID
from pipelines.service import KnowledgeService

__all__ = ["Catalog", "UnknownKnowledgeError", "parse_knowledge"]

_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")


class UnknownKnowledgeError(LookupError):
    """A call named no knowledge base, or one that is not served (the message lists those that are)."""


def parse_knowledge(spec: str) -> tuple[str, str]:
    """
    Read one `--knowledge NAME=DATA_DIR` option.

    :param spec: e.g. `hr=/srv/kb/hr/data`.
    :returns: The name and the data folder.
    :raises ValueError: If it is not `NAME=DATA_DIR` with a name of 1 to 40 letters, digits, `_` or `-`.
    """
    name, sep, folder = spec.partition("=")
    if not sep or not _NAME.fullmatch(name) or not folder.strip():
        msg = f"--knowledge {spec!r} must be NAME=DATA_DIR, NAME 1 to 40 letters, digits, '_', '-' (e.g. hr=data/hr)"
        raise ValueError(msg)
    return name, folder.strip()


class Catalog:
    """
    The knowledge bases a server serves, by name.

    ### Usage example

    ```python
    catalog = Catalog({"hr": hr_service, "ops": ops_service})
    catalog.pick("hr").lookup("how many leave days?")
    ```
    """

    def __init__(self, services: KnowledgeService | Mapping[str, KnowledgeService]) -> None:
        """
        :param services: One service (it answers to its `knowledge_ids`), or services by knowledge base name (each
            service's `name` is set to it).
        :raises ValueError: If there is none.
        """
        if not isinstance(services, Mapping):
            # one knowledge base: its name is whatever it answers to (read when asked: the store may be down now)
            services = {getattr(services, "name", "") or DEFAULT_KNOWLEDGE_ID: services}
        elif not services:
            msg = "a catalog needs at least one knowledge base"
            raise ValueError(msg)
        else:
            for name, service in services.items():
                service.name = name
        self.services = dict(services)

    @property
    def several(self) -> bool:
        """Whether calls must say which knowledge base they mean."""
        return len(self.services) > 1

    def names(self) -> list[str]:
        """
        :returns: The knowledge bases' names, in the order given.
        """
        return list(self.services)

    def __iter__(self) -> Iterator[KnowledgeService]:
        return iter(self.services.values())

    def pick(self, name: str | None) -> KnowledgeService:
        """
        The service of one knowledge base.

        :param name: Its name; None (or '') only when one knowledge base is served.
        :returns: The service.
        :raises UnknownKnowledgeError: For no name among several, or a name that is not served.
        """
        if not name:
            if self.several:
                msg = f"name the knowledge base (`knowledge`): one of {', '.join(self.names())}"
                raise UnknownKnowledgeError(msg)
            return next(iter(self.services.values()))
        if name in self.services:
            return self.services[name]
        if not self.several:
            only = next(iter(self.services.values()))
            if name in only.knowledge_ids():
                return only
        msg = f"no knowledge base {name!r} is served here: use one of {', '.join(self.names())}"
        raise UnknownKnowledgeError(msg)

    def for_knowledge_id(self, knowledge_id: str) -> KnowledgeService | None:
        """
        The service Dify's `knowledge_id` selects: a knowledge base's name, or (one served) its other ids.

        :param knowledge_id: From Dify's request.
        :returns: The service, or None (Dify's 2001).
        """
        if knowledge_id in self.services:
            return self.services[knowledge_id]
        if not self.several:
            service = next(iter(self.services.values()))
            return service if knowledge_id in service.knowledge_ids() else None
        return None
