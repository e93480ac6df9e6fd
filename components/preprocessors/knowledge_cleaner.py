from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from haystack import Document, component, logging

logger = logging.getLogger(__name__)

#: control characters no text needs (tab, newline and the form feed that marks a PDF's page break are kept): what PDF
#: and office converters leave behind
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


@component
class KnowledgeCleaner:
    """
    Cleans converted documents for chunking, whatever converter made them, and reports those left without text.

    Line endings become `\\n` (`\\r\\n` and lone `\\r`), a leading byte-order mark and control characters other than
    tab, newline and form feed (a page break, which the chunker counts) go, and, with `strip_trailing_spaces`, spaces at
    line ends. A document with no text left is not passed on: it is reported in `failures` with its source, so that an
    index run says why it has no chunks. Metadata is never changed.

    ### Usage example

    ```python
    from haystack import Document
    from components.preprocessors.knowledge_cleaner import KnowledgeCleaner

    out = KnowledgeCleaner().run(documents=[Document(content="Disk full\\r\\n\\x00", meta={"source": "a.md"})])
    print(repr(out["documents"][0].content), out["failures"])  # 'Disk full\\n' []
    ```
    """

    def __init__(self, strip_trailing_spaces: bool = False) -> None:
        """
        Create the cleaner.

        :param strip_trailing_spaces: Also remove spaces and tabs at the end of every line (markdown's two-space line
            break is then lost; off by default).
        """
        self.strip_trailing_spaces = strip_trailing_spaces

    def _clean(self, text: str) -> str:
        text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
        text = _CONTROL.sub("", text)
        if self.strip_trailing_spaces:
            text = "\n".join(line.rstrip(" \t") for line in text.split("\n"))
        return text

    @component.output_types(documents=list[Document], failures=list[dict[str, str]])
    def run(self, documents: list[Document]) -> dict[str, Any]:
        """
        Clean the documents.

        :param documents: Converted documents; they are not modified.
        :returns: `documents`: cleaned copies (a document already clean is passed on as it is); `failures`:
            `{"source", "reason"}` per document left without text.
        """
        cleaned: list[Document] = []
        failures: list[dict[str, str]] = []
        for doc in documents:
            text = self._clean(doc.content or "")
            if not text.strip():
                source = str(doc.meta.get("source") or doc.id)
                logger.warning("No text in {source} after cleaning", source=source)
                failures.append({"source": source, "reason": "no text left after cleaning"})
                continue
            cleaned.append(doc if text == doc.content else replace(doc, content=text))
        return {"documents": cleaned, "failures": failures}
