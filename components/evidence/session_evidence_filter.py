from __future__ import annotations

from typing import Any

from haystack import Document, component, logging
from haystack.utils import Secret

from components.core.frozen import Documents, FrozenList
from components.core.versions import TEXT_KEY_PREFIX
from components.trace.safe_text import safe_text
from components.trace.session_key import normalize_session_id
from components.trace.trace_store import PASSWORD_ENV, TraceStore

logger = logging.getLogger(__name__)


@component
class SessionEvidenceFilter:
    """
    Holds back evidence already returned earlier in the same session, so an agent never consumes it twice.

    The memory is the trace store itself: the evidence keys of earlier `found` lookups of the session, matched by the
    digest of the whole normalized session id and the caller's principal (two sessions never share memory, however
    long their ids, and neither do two principals' sessions of one id, nor a principal's and an anonymous caller's).
    Without a `session_id` nothing is held back. If the trace database cannot be read within `timeout_s` (a stopped
    server is not waited for), only what the spool (and rows waiting in memory) remember is held back and the summary
    says why (better a repeat than a lost answer); a spooled row of the wrong shape is skipped, never an error.
    Blocks whose key is in `exclude` (what a cursor's earlier pages returned) are held back too, with or without a
    session. A block is held back by its evidence key or by its text key (`components.core.versions.text_key`): the
    same text of a page, which another release of the page or the page before a re-index gave, is not given twice.

    ### Usage example

    ```python
    from components.evidence.session_evidence_filter import SessionEvidenceFilter

    out = SessionEvidenceFilter(database_url="sqlite:///data/traces.db").run(documents=blocks, session_id="s1")
    print(out["session_summary"]["suppressed"])
    ```
    """

    def __init__(
        self,
        database_url: str = "sqlite:///data/traces.db",
        spool_path: str | None = "data/trace_spool.jsonl",
        timeout_s: float = 0.5,
        database_password: Secret | None = Secret.from_env_var(PASSWORD_ENV, strict=False),  # noqa: B008 - Haystack's idiom
    ) -> None:
        """
        Create the filter.

        :param database_url: The trace database (SQLAlchemy URL).
        :param spool_path: The trace spool file, whose rows also count.
        :param timeout_s: Longest wait for the trace database per lookup (from `warm_up` on, the first lookup's too).
        :param database_password: The database password as a Haystack `Secret` (by default the `TRACE_DB_PASSWORD`
            environment variable; a password written into `database_url` works too, but is part of the configuration).
        :raises ValueError: If `database_url` is empty.
        """
        if not database_url:
            msg = "database_url='' must be a SQLAlchemy URL such as sqlite:///data/traces.db"
            raise ValueError(msg)
        self.database_url = database_url
        self.spool_path = spool_path
        self.timeout_s = timeout_s
        self.database_password = database_password
        self._store = TraceStore(database_url, spool_path, timeout_s=timeout_s, password=database_password)

    def warm_up(self) -> None:
        """
        Start connecting to the trace database in the background (idempotent): a lookup then waits at most
        `timeout_s` for it, the first lookup of the process included.
        """
        self._store.connect_soon()

    def close(self) -> None:
        """Release the database connection."""
        self._store.close()

    @component.output_types(documents=FrozenList[Document], session_summary=dict[str, Any])
    def run(
        self,
        documents: Documents,
        session_id: str | None = None,
        exclude: list[str] | None = None,
        principal: str | None = None,
    ) -> dict[str, Any]:
        """
        Drop blocks whose evidence key was already returned in the session, or on earlier pages of the same lookup.

        :param documents: Final evidence blocks (a list or a `FrozenList`).
        :param session_id: The caller's session; empty means no session dedup.
        :param exclude: Evidence and text keys the caller already has from earlier pages of this lookup (its `cursor`).
        :param principal: The caller's principal name (None or empty: an anonymous caller): only what was returned
            to this principal in this session is held back.
        :returns: `documents` (the new blocks, a read-only `FrozenList`) and `session_summary` (`session_id`,
            `previously_returned`, `suppressed` keys, `paged`: the keys `exclude` held back, `excluded`: `exclude`
            itself, `error`).
        """
        session_id = normalize_session_id(session_id)
        summary: dict[str, Any] = {"session_id": session_id or None, "previously_returned": 0, "suppressed": []}
        if exclude:
            held = set(exclude)
            summary["excluded"] = list(exclude)
            summary["paged"] = [d.meta.get("evidence_key") for d in documents if _held(d, held)]
            documents = [d for d in documents if not _held(d, held)]
        if not session_id or not documents:
            return {"documents": FrozenList(documents), "session_summary": summary}
        seen, error = self._store.session_memory(session_id, principal)
        if error:
            logger.warning("Session memory partial: {error}", error=error)
            summary["error"] = f"session memory partial (rows waiting in the spool only): {error}"
        fresh = [d for d in documents if not _held(d, seen, stored=True)]
        summary["previously_returned"] = sum(1 for key in seen if not key.startswith(TEXT_KEY_PREFIX))
        summary["suppressed"] = [d.meta.get("evidence_key") for d in documents if d not in fresh]
        return {"documents": FrozenList(fresh), "session_summary": summary}


def _held(doc: Document, keys: set[str], stored: bool = False) -> bool:
    """
    Whether a block's evidence key or text key is among `keys`.

    :param doc: An evidence block.
    :param keys: Evidence and text keys held back.
    :param stored: The keys were read back from trace rows, which hold keys as `safe_text` made them.
    :returns: True when the block is held back.
    """
    own = (doc.meta.get("evidence_key"), doc.meta.get("text_key"))
    return any(key is not None and (safe_text(str(key)) if stored else key) in keys for key in own)
