"""docs/SETTINGS.md's settings table, made from the settings classes so that it cannot drift from them.

    .venv/bin/python -m scripts.settings_table           # rewrite the table between the markers in docs/SETTINGS.md
    .venv/bin/python -m scripts.settings_table --check   # exit 1 when docs/SETTINGS.md's table is not what this makes

One row per key of every section the loader reads (``wire.settings.SECTIONS``): its TOML name, its
default as TOML writes it, and its meaning: the string under the field in the class (an attribute docstring,
the convention ``pipeline/settings.py`` and ``wire/settings.py`` follow). A field without one is an
error, and tests/test_settings_loader.py fails on it and on a docs/SETTINGS.md that differs.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
from collections.abc import Mapping
from pathlib import Path

from scripts.readme_block import main, replace_block
from wire.settings import SECTIONS

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_DOC = ROOT / "docs" / "SETTINGS.md"

BEGIN = "<!-- settings table: made by scripts/settings_table.py from the settings classes; edit them, not this -->"
END = "<!-- end of the settings table -->"


def meanings(cls: type) -> dict[str, str]:
    """Each field's meaning: the string literal that follows its line in the class body, on one line."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
    out = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr) \
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            out[node.target.id] = " ".join(after.value.value.split())
    return out


def undocumented(cls: type) -> list[str]:
    """The fields of ``cls`` that have no meaning written under them."""
    known = meanings(cls)
    return [f.name for f in dataclasses.fields(cls) if not known.get(f.name)]


def toml_value(value: object) -> str:
    """``value`` as it is written in configs/settings.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML form for {value!r}")


def _cell(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|")


def table(sections: Mapping[str, type] = SECTIONS) -> str:
    """The markdown table of every key of ``sections``; ``ValueError`` names the fields with no meaning."""
    missing = [f"{name}.{key}" for name, cls in sections.items() for key in undocumented(cls)]
    if missing:
        raise ValueError(f"settings without a meaning (write a docstring under the field): {', '.join(missing)}")
    rows = ["| setting | default | meaning |", "|---|---|---|"]
    for name, cls in sections.items():
        known, defaults = meanings(cls), cls()
        for f in dataclasses.fields(cls):
            rows.append(f"| `{name}.{f.name}` | `{_cell(toml_value(getattr(defaults, f.name)))}` | {_cell(known[f.name])} |")
    return "\n".join(rows)


def rewrite(doc: str) -> str:
    """``doc`` (docs/SETTINGS.md) with the text between the markers replaced by the table."""
    return replace_block(doc, BEGIN, END, table(), name="docs/SETTINGS.md")


if __name__ == "__main__":
    raise SystemExit(main(__doc__.splitlines()[0], rewrite, path=SETTINGS_DOC, what="settings table"))
