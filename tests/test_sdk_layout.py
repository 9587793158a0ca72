"""The SDK's shape, read from its source: the two client faces hold no calls of their own (everything a
call decides is in ``producer.core``), and the SDK and book modules import one way, lazy imports counted
(``tests/test_structure.py`` checks module-level circles over the whole project): books is a front end on
the SDK, so no SDK module imports books, and the book facade ``books`` is imported by no module it re-exports."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.test_structure import MODULES, _cycles, _project_module, _tree
from tests.test_structure import _imports as structure_imports

ROOT = Path(__file__).resolve().parent.parent
FACES = ("producer/client.py", "producer/aio.py")
# What a face may take from the rest of producer/: the core, argument checks, the record types it returns.
FACE_IMPORTS = {"producer.core", "producer.checks", "wire.records", "wire.status"}
RECORD_TYPES = {"Chunk", "JobResult"}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in ``path``, lazy ones included."""
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
    return out


def test_the_faces_only_perform_steps() -> None:
    for face in FACES:
        path = ROOT / face
        for module, names in _imports(path):
            if module.startswith(("producer", "books")):
                assert module in FACE_IMPORTS, f"{face} imports {module}: calls belong in producer.core"
            if module == "wire.records":
                assert set(names) <= RECORD_TYPES, f"{face} takes {set(names) - RECORD_TYPES} from the wire"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        redis_calls = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                       and isinstance(node.value, ast.Attribute) and node.value.attr == "redis"
                       and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"}
        assert redis_calls <= {"close", "aclose"}, f"{face} sends Redis commands itself: {redis_calls}"


SDK = ("producer.client", "producer.aio", "producer.core", "books")  # books.* too (prefix)


def test_the_sdk_and_book_modules_import_one_way() -> None:
    graph = {}
    for name, path in MODULES.items():
        deps = {_project_module(mod) for mod, _ in structure_imports(name, _tree(path), everywhere=True)}
        graph[name] = {d for d in deps if d and d != name}
    assert "books" in graph and "producer.client" in graph["books.cli"]
    sdk_to_books = {m: sorted(d for d in graph[m] if d.split(".")[0] == "books")  # the CLI dispatches to it
                    for m in graph if m.split(".")[0] == "producer" and not m.startswith("cli")}
    assert not any(sdk_to_books.values()), f"the SDK imports books (a front end on it): {sdk_to_books}"
    through_sdk = [c for c in _cycles(graph) if any(m.startswith(SDK) for m in c)]
    assert through_sdk == [], f"import circles through the SDK (lazy imports counted): {through_sdk}"
    assert not any("books" in graph[m] for m in graph if m.startswith(SDK)), "the book facade is imported back"
