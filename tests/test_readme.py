"""The README states what the code does: its environment table is the code's list, its links resolve."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from components.core import environment
from pipelines.entrypoints import cli

REPO_ROOT = Path(__file__).resolve().parent.parent
README = REPO_ROOT / "README.md"


def table_rows(text: str, header: str) -> list[list[str]]:
    """
    The rows of the markdown table whose header line starts with `header`.

    :param text: The markdown.
    :param header: The header line's start, e.g. `| variable |`.
    :returns: Each row's cells, stripped.
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


class TestReadme:
    def test_the_environment_table_is_the_list_the_code_reads(self):
        rows = table_rows(README.read_text(encoding="utf-8"), "| variable |")
        documented = [(name.strip("`"), default, meaning) for name, default, meaning in rows]
        assert documented == [(v.name, v.default, v.meaning) for v in environment.ALL]

    def test_every_subcommand_is_in_the_command_table(self):
        rows = table_rows(README.read_text(encoding="utf-8"), "| command |")
        documented = {row[0].split()[1] for row in rows}
        subcommands = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
        assert documented == set(subcommands.choices)

    def test_every_relative_link_resolves(self):
        text = README.read_text(encoding="utf-8")
        targets = re.findall(r"\]\(((?!https?:)[^)#]+)", text)
        assert targets, "the README links its docs"
        missing = [t for t in targets if not (REPO_ROOT / t).exists()]
        assert missing == []

    def test_it_stays_a_readme(self):
        # the detail lives in docs/; the README is what a newcomer reads top to bottom
        assert len(README.read_text(encoding="utf-8").splitlines()) <= 260
