"""Who may import whom, checked over the source (ast, nothing imported): docs STYLE "Who may import whom".

- no module of producer/ (the wire, the SDK, the CLI) or of a front end (gateway/, books/) imports workers/;
- a front end takes from producer/ only the wire and the SDK (``FRONT_END_MAY_IMPORT``), and has no import
  circle even counting lazy imports and the package ``__init__`` that ``from gateway import x`` runs;
- the CLI is a thin dispatcher (a package of command groups): no Redis connection, key or command of its own;
- pipeline/ imports none of redis, celery, boto3, kombu, and defines no farm settings;
- no import circles among the project's modules (module-level imports, as they run; and every import counted);
- only producer/wire imports redis (bench/ aside; tests and scripts/ are not scanned);
- os.environ appears only in entry points and the settings loader;
- logging is configured (level, format, handlers) only in an entry point's ``main``;
- each error code string is defined once (producer/wire/errors.py or pipeline/errors.py);
- no file cites a file outside the repository (a reader has only the repository): a measured fact names the
  command here that measures it, or says that none does.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("producer", "books", "bench", "gateway", "workers", "pipeline")
FRONT_ENDS = ("gateway", "books")  # packages that serve the farm to clients: they depend on the wire and the SDK only


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(name: str, tree: ast.AST, *, everywhere: bool, type_checking: bool = False) -> Iterator[tuple[str, int]]:
    """(imported module, line) of each import: module-level ones (with try/if blocks; ``if TYPE_CHECKING``
    only when ``type_checking``), or every one when ``everywhere``. ``from a import b`` names a.b when that
    is a module of the project, else a."""
    is_pkg = MODULES.get(name, Path()).name == "__init__.py"

    def walk(body: list[ast.stmt]) -> Iterator[ast.stmt]:
        for node in body:
            yield node
            if isinstance(node, ast.If) and (type_checking or not _is_type_checking(node)):
                yield from walk(node.body)
                yield from walk(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *[h.body for h in node.handlers]):
                    yield from walk(block)

    nodes = ast.walk(tree) if everywhere else walk(tree.body)  # type: ignore[attr-defined]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield (sub if sub in MODULES else module), node.lineno


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _project_module(imported: str) -> str | None:
    while imported and imported not in MODULES:
        imported = imported.rpartition(".")[0]
    return imported or None


def test_no_module_of_producer_or_a_front_end_imports_workers() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items() if name.split(".")[0] in ("producer", *FRONT_ENDS)
           for mod, line in _imports(name, _tree(path), everywhere=True) if mod.split(".")[0] == "workers"]
    assert not bad, "producer/ (the wire, the SDK) and front ends must not import workers/:\n" + "\n".join(bad)


# What a front end may take from producer/: the wire (every module of producer.wire) and the SDK: the client faces,
# the argument checks, encoding a chunk stream, and planning a submission (the gateway warms the text frontend with
# it). Not the CLI, the book runner, the local farm launcher or the bench: what a front end needs from those belongs
# in the wire or the SDK.
FRONT_END_MAY_IMPORT = {"producer", "producer.client", "producer.aio", "producer.checks", "producer.encoded",
                        "producer.submit"}


def test_front_ends_take_only_the_wire_and_the_sdk_from_producer() -> None:
    assert FRONT_ENDS and all((ROOT / pkg / "__init__.py").is_file() for pkg in FRONT_ENDS)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items() if name.split(".")[0] in FRONT_ENDS
           for mod, line in _imports(name, _tree(path), everywhere=True)
           if mod.split(".")[0] == "producer" and not mod.startswith("producer.wire")
           and _project_module(mod) not in FRONT_END_MAY_IMPORT]
    assert not bad, "a front end uses the wire and the SDK only (FRONT_END_MAY_IMPORT):\n" + "\n".join(bad)
    for pkg in FRONT_ENDS:  # nor the broker's client library: the wire names what it raises (BrokerError)
        found = [f"{path.relative_to(ROOT)}:{line}" for name, path in MODULES.items() if name.split(".")[0] == pkg
                 for mod, line in _imports(name, _tree(path), everywhere=True) if mod.split(".")[0] == "redis"]
        assert not found, f"{pkg}/ imports redis; go through the wire or the SDK: {found}"


def _in_cli(name: str) -> bool:
    return name == "producer.cli" or name.startswith("producer.cli.")


# What the CLI starts without being it: front ends (the gateway, books, the bench), each imported inside its command.
CLI_DISPATCHES = (*FRONT_ENDS, "books", "bench")


def test_producer_imports_a_front_end_only_where_the_cli_dispatches_to_it() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items() if name.split(".")[0] == "producer"
           for mod, line in _imports(name, _tree(path), everywhere=True) if mod.split(".")[0] in FRONT_ENDS
           and (not _in_cli(name) or (mod, line) in set(_imports(name, _tree(path), everywhere=False)))]
    assert not bad, "producer/ imports front ends only lazily, in the CLI command that starts one:\n" + "\n".join(bad)
    eager = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
             for name, path in MODULES.items() if _in_cli(name)
             for mod, line in _imports(name, _tree(path), everywhere=False) if mod.split(".")[0] in CLI_DISPATCHES]
    assert not eager, "the CLI imports a front end inside the command that starts it, never at import:\n" + "\n".join(eager)


def _graph_through_packages() -> dict[str, set[str]]:
    """Every import (lazy ones too), each also as an import of the package ``__init__``s on its way, which Python
    runs first (a module's own packages excepted: they run before it whatever it imports)."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = set()
        for mod, _ in _imports(name, _tree(path), everywhere=True):
            target = _project_module(mod)
            while target:
                deps.add(target)
                target = target.rpartition(".")[0]
                if target and MODULES.get(target, Path()).name != "__init__.py":
                    break
        graph[name] = {d for d in deps if d and d != name and not name.startswith(d + ".")}
    return graph


def test_front_ends_have_no_import_circles_lazy_imports_counted() -> None:
    for name, path in MODULES.items():
        if name.split(".")[0] in FRONT_ENDS:
            assert "from gateway import" not in path.read_text(encoding="utf-8"), \
                f"{path.relative_to(ROOT)}: import the module (gateway.x), not through the package __init__"
    cycles = [c for c in _cycles(_graph_through_packages()) if any(m.split(".")[0] in FRONT_ENDS for m in c)]
    assert not cycles, "import circles through a front end:\n" + "\n".join(" <-> ".join(c) for c in cycles)


CLI_MAX_LINES = 350


def test_the_cli_is_a_thin_dispatcher() -> None:
    """producer/cli/ parses and dispatches: its ``__init__`` only builds the parser from the command groups and
    runs the command; a command's behaviour lives in its group's module, and Redis is reached through the SDK
    client (``Client.from_url``) and its broker's steps, never a connection, a key or a Redis command of its own."""
    cli = {name: path for name, path in MODULES.items() if _in_cli(name)}
    assert len(cli) > 1, "producer/cli/ is a package: a module per command group"
    for name, path in cli.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= CLI_MAX_LINES, f"{path.relative_to(ROOT)} is {lines} lines: split the command group"
        own = [f"{mod} (line {line})" for mod, line in _imports(name, _tree(path), everywhere=True)
               if mod.split(".")[0] in ("redis", "celery", "workers")
               or mod in ("producer.wire.keys", "producer.wire.redis_broker", "producer.wire.lua", "producer.wire.lua_admission")]
        assert not own, f"{path.relative_to(ROOT)} reaches the broker itself: {own}"
    dispatcher = MODULES["producer.cli"]
    own = [f"{mod} (line {line})" for mod, line in _imports("producer.cli", _tree(dispatcher), everywhere=True)
           if mod.startswith("producer") and not _in_cli(mod)]
    assert not own, f"producer/cli/__init__.py only dispatches to the command groups: {own}"


def test_pipeline_imports_no_broker_or_storage_client() -> None:
    banned = {"redis", "celery", "boto3", "botocore", "kombu"}
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items() if name.split(".")[0] == "pipeline"
           for mod, line in _imports(name, _tree(path), everywhere=True)
           if mod.split(".")[0] in banned | {"producer", "workers"}]
    assert not bad, "pipeline/ is pure compute:\n" + "\n".join(bad)


def test_pipeline_defines_no_farm_settings() -> None:
    farm = {"RedisSettings", "QueueSettings", "StorageSettings", "WorkerSettings", "GatewaySettings", "SchedulingSettings",
            "StreamingSettings", "Settings", "load_settings"}
    found = [f"{path.relative_to(ROOT)}: {node.name}"
             for name, path in MODULES.items() if name.split(".")[0] == "pipeline"
             for node in ast.walk(_tree(path)) if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in farm]
    assert not found, "farm settings belong to producer/wire/settings.py:\n" + "\n".join(found)
    farm_errors = {"JobError", "OverloadedError", "TransientError", "JobNotFoundError", "JobTimeoutError"}
    found = [f"{path.relative_to(ROOT)}: {node.name}"
             for name, path in MODULES.items() if name.split(".")[0] == "pipeline"
             for node in ast.walk(_tree(path)) if isinstance(node, ast.ClassDef) and node.name in farm_errors]
    assert not found, "farm errors belong to producer/wire/errors.py:\n" + "\n".join(found)


def _graph(*, type_checking: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps = {_project_module(mod) for mod, _ in _imports(name, _tree(path), everywhere=False, type_checking=type_checking)}
        graph[name] = {d for d in deps if d and d != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles() -> None:
    cycles = _cycles(_graph(type_checking=False))
    assert not cycles, "import circles (module-level imports):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_circles_even_in_annotations() -> None:
    cycles = _cycles(_graph(type_checking=True))
    assert not cycles, "import circles (with TYPE_CHECKING imports):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_import_circles_anywhere_lazy_imports_counted() -> None:
    """Across the whole project: every import counts, in a function or under ``if TYPE_CHECKING`` too (a lazy import
    hides a circle from import time, not from the reader), and so do the package ``__init__``s an import runs."""
    cycles = _cycles(_graph_through_packages())
    assert not cycles, "import circles (every import counted):\n" + "\n".join(" <-> ".join(c) for c in cycles)


# Who may import the broker's client library: the wire (its Broker implementation). Tests, bench/ and scripts/
# drive a real Redis themselves and stay outside this rule.
REDIS_OUTSIDE_THE_WIRE_EXEMPT = ("bench",)


def test_only_the_wire_imports_redis() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items()
           if not name.startswith("producer.wire") and name.split(".")[0] not in REDIS_OUTSIDE_THE_WIRE_EXEMPT
           for mod, line in _imports(name, _tree(path), everywhere=True) if mod.split(".")[0] == "redis"]
    assert not bad, "only producer/wire imports redis; go through the Broker or another wire module:\n" + "\n".join(bad)


# Entry points (a command's main, the Celery app module, the gateway's app factory) and the settings loader.
ENVIRON_ALLOWED = {
    "producer.wire.settings": "the settings loader (settings_from_environment)",
    "producer.cli.common": "`ttsfarm`'s settings: configs/ plus the environment and --redis",
    "books.cli": "`ttsfarm book` main",
    "gateway.app": "`ttsfarm gateway` main and the uvicorn app factory",
    "workers.app": "the Celery app module (`celery -A workers.app worker`)",
    "producer.local": "starts worker processes: their environment is this one's plus the farm's overrides",
}


def test_os_environ_only_in_entry_points_and_the_loader() -> None:
    found = {}
    for name, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv", "unsetenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                found.setdefault(name, []).append(node.lineno)
            elif isinstance(node, ast.ImportFrom) and node.module == "os" and \
                    any(a.name in ("environ", "getenv", "putenv") for a in node.names):
                found.setdefault(name, []).append(node.lineno)
    bad = {name: lines for name, lines in found.items() if name not in ENVIRON_ALLOWED}
    assert not bad, f"os.environ outside entry points and the settings loader: {bad}"
    stale = set(ENVIRON_ALLOWED) - set(found)
    assert not stale, f"allowed modules that no longer read the environment (drop them from the list): {stale}"


LOGGING_SETUP = {"basicConfig", "dictConfig", "fileConfig", "setLevel", "addHandler", "captureWarnings"}


def test_logging_is_configured_only_in_an_entry_points_main() -> None:
    """Library modules only ``logging.getLogger(__name__)``; the level, format and handlers are an entry point's
    choice (``main`` of the CLI, ``ttsfarm book``, the gateway; Celery configures the workers')."""
    bad = []
    for name, path in MODULES.items():
        tree = _tree(path)
        in_main = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name == "main" for n in ast.walk(f)}
        bad += [f"{path.relative_to(ROOT)}:{node.lineno} {node.func.attr}" for node in ast.walk(tree)
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOGGING_SETUP
                and id(node) not in in_main]
    assert not bad, "logging configured outside an entry point's main:\n" + "\n".join(bad)


def _code_registry() -> set[str]:
    from pipeline import errors as pe
    from producer.wire import errors as we

    codes = {v for m in (pe, we) for k, v in vars(m).items() if k.isupper() and isinstance(v, str)}
    codes |= {cls.code for m in (pe, we) for cls in vars(m).values() if isinstance(cls, type) and hasattr(cls, "code")}
    return codes


def _string_constants(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """String constants outside ``__all__`` lists and docstrings."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            skip |= {id(n) for n in ast.walk(node.value)}
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body \
                and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
            skip.add(id(node.body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.value, node.lineno


def _code_literals(modules: dict[str, Path]) -> dict[str, list[str]]:
    codes = _code_registry()
    where: dict[str, list[str]] = {}
    for path in modules.values():
        for value, line in _string_constants(_tree(path)):
            if value in codes:
                where.setdefault(value, []).append(f"{path.relative_to(ROOT)}:{line}")
    return where


def test_each_error_code_is_defined_once() -> None:
    codes = _code_registry()
    assert {"BAD_INPUT", "MALFORMED_JOB", "JOB_FAILED", "OVERLOADED", "BAD_KEY", "BAD_BOOK", "NO_WORKERS"} <= codes
    where = _code_literals(MODULES)
    twice = {code: places for code, places in where.items() if len(places) > 1}
    assert not twice, f"error codes spelled out more than once (use the constant): {twice}"
    homes = {"pipeline/errors.py", "producer/wire/errors.py"}
    elsewhere = {code: places for code, places in where.items() if not any(p.split(":")[0] in homes for p in places)}
    assert not elsewhere, f"error codes defined outside pipeline/errors.py and producer/wire/errors.py: {elsewhere}"
    missing = codes - set(where)
    assert not missing, f"codes the registry names but no module defines as a literal: {missing}"


# A citation of the planning notes, a file outside the repository; the character classes keep this file from
# matching itself.
OUTSIDE_CITATION = re.compile(r"FINDING[S]|/work/share[d]|\.\./share[d]/")


def _repository_files() -> list[Path]:
    """Every file git tracks or would track (untracked files that are not ignored too)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    return [ROOT / name for name in listed.split("\0") if name and (ROOT / name).is_file()]


def test_nothing_cites_a_file_outside_the_repository() -> None:
    files = _repository_files()
    assert ROOT / "README.md" in files and ROOT / "docs" / "BENCHMARKS.md" in files
    bad = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
           for path in files
           for n, line in enumerate(path.read_bytes().decode("utf-8", "replace").splitlines(), 1)
           if OUTSIDE_CITATION.search(line)]
    assert not bad, "cite the command here that measures it (or say none does), not a file outside the repository:\n" \
        + "\n".join(bad)


def test_the_citation_check_finds_a_citation() -> None:
    assert OUTSIDE_CITATION.search("max abs diff 0.0, /work/" + "shared/notes.md)")
    assert OUTSIDE_CITATION.search("measured in FIND" + "INGS \"Streaming feasibility\"")
    assert OUTSIDE_CITATION.search("see .." + "/shared/notes.md")
    assert not OUTSIDE_CITATION.search("The committee will publish its findings next spring")
