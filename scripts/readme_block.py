"""A block of a doc made by a script: the text between two marker lines, rewritten or checked.

``scripts/settings_table.py`` (the settings table of docs/SETTINGS.md) and ``scripts/readme_numbers.py`` (README.md's
measured numbers) each own one block; their ``--check`` exits 1 with a diff when the doc's block is not what they
make, and a test runs each check.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def replace_block(text: str, begin: str, end: str, body: str, *, name: str = "README.md") -> str:
    """``text`` with what lies between the lines ``begin`` and ``end`` replaced by ``body``."""
    head, found_begin, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found_begin or not found_end:
        raise ValueError(f"{name} lacks the markers {begin!r} ... {end!r}")
    return f"{head}{begin}\n{body}\n{end}{tail}"


def main(description: str, rewrite: Callable[[str], str], argv: list[str] | None = None, *,
         path: Path = README, what: str = "block") -> int:
    """The command line of a block's script: rewrite ``path`` in place, or with ``--check`` print the diff and
    exit 1 when it differs."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--check", action="store_true", help=f"exit 1 when {path.name}'s {what} is not what this makes")
    args = ap.parse_args(argv)
    current = path.read_text(encoding="utf-8")
    wanted = rewrite(current)
    if args.check:
        diff = list(difflib.unified_diff(current.splitlines(), wanted.splitlines(), path.name, "made", lineterm=""))
        print("\n".join(diff) or f"{path.name}'s {what} is up to date")
        return 1 if diff else 0
    if wanted != current:
        path.write_text(wanted, encoding="utf-8")
    return 0
