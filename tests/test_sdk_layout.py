"""The SDK's shape, read from its source: the two client faces hold no calls of their own (everything a
call decides is in ``producer.core``), and the SDK and book modules import one way, lazy imports counted
(``tests/test_structure.py`` checks module-level circles over the whole project): the book facade
``producer.book`` is imported by no module it re-exports, and the client never imports the book CLI back."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACES = ("producer/client.py", "producer/aio.py")
# What a face may take from the rest of producer/: the core, argument checks, the settings, the record types
# it returns, and (sync) the book runner it hands itself to.
FACE_IMPORTS = {"producer.core", "producer.checks", "producer.wire.settings", "producer.wire.records", "producer.book_handle"}
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


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_faces_only_perform_steps() -> None:
    for face in FACES:
        path = ROOT / face
        for module, names in _imports(path):
            if module.startswith("producer"):
                assert module in FACE_IMPORTS, f"{face} imports {module}: calls belong in producer.core"
            if module == "producer.wire.records":
                assert set(names) <= RECORD_TYPES, f"{face} takes {set(names) - RECORD_TYPES} from the wire"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        redis_calls = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                       and isinstance(node.value, ast.Attribute) and node.value.attr == "redis"
                       and isinstance(node.value.value, ast.Name) and node.value.value.id == "self"}
        assert redis_calls <= {"close", "aclose"}, f"{face} sends Redis commands itself: {redis_calls}"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


SDK = ("producer.client", "producer.aio", "producer.core", "producer.book")  # producer.book_* too (prefix)


def test_the_sdk_and_book_modules_import_one_way() -> None:
    paths = {_module(p): p for p in (ROOT / "producer").rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in paths}
    for m, path in paths.items():
        for module, names in _imports(path):
            graph[m] |= {t for t in (module, *(f"{module}.{n}" for n in names)) if t in paths and t != m}
    assert "producer.book" in graph and "producer.client" in graph
    through_sdk = [c for c in _cycles(graph) if any(m.startswith(SDK) for m in c)]
    assert through_sdk == [], f"import circles through the SDK (lazy imports counted): {through_sdk}"
    assert not any("producer.book" in graph[m] for m in graph if m.startswith(SDK)), "the book facade is imported back"
