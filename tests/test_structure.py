"""The rooms of the house and who may import whom, checked over the source (ast, nothing imported): docs STYLE
"The layout shows the data flow" and "Who may import whom".

- wire/ is top level: what both sides agree on, its Redis and storage backends below it; it imports no other
  room of the farm but pipeline/ (errors, text limits);
- producer/ is the SDK alone: small, and it imports neither workers/, the CLI, a front end nor the bench;
- no module of a front end (gateway/, grpcfront/, books/) imports workers/; a front end takes from producer/ only the
  SDK (``FRONT_END_MAY_IMPORT``), and has no import circle even counting lazy imports and package ``__init__``s;
- the CLI (cli/) is a thin dispatcher over the SDK and the front ends: no Redis connection, key or command of its own,
  and a front end is imported inside the command that starts it;
- pipeline/ imports none of redis, celery, boto3, kombu, nor the farm, and defines no farm settings;
- no import circles among the project's modules (module-level imports, as they run; and every import counted);
- only wire/ imports redis (bench/ aside; tests and scripts/ are not scanned);
- os.environ appears only in entry points and the settings loader;
- logging is configured (level, format, handlers) only in an entry point's ``main``;
- each error code string is defined once (wire/errors.py or pipeline/errors.py);
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
PACKAGES = ("wire", "producer", "cli", "books", "bench", "gateway", "grpcfront", "workers", "pipeline")
FRONT_ENDS = ("gateway", "grpcfront", "books")  # serve the farm to clients: they depend on the wire and the SDK only


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


def _imports_of(top: str, *, everywhere: bool = True) -> Iterator[tuple[str, Path, str, int]]:
    """(module, path, imported, line) for every import in the modules of package ``top``."""
    for name, path in MODULES.items():
        if name.split(".")[0] == top:
            for mod, line in _imports(name, _tree(path), everywhere=everywhere):
                yield name, path, mod, line


def test_the_rooms_are_where_the_layout_says() -> None:
    for room in ("wire", "wire/redis", "wire/storage", "producer", "cli", "pipeline"):
        assert (ROOT / room / "__init__.py").is_file(), f"{room}/ is a package"
    assert (ROOT / "workers" / "app.py").is_file()  # the Celery app: `celery -A workers.app worker`
    assert not (ROOT / "producer" / "wire").exists() and not (ROOT / "producer" / "cli").exists()


WIRE_MAY_IMPORT = ("wire", "pipeline")  # pipeline: its error base classes and codes, the text limits


def test_the_wire_stands_alone() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for _, path, mod, line in _imports_of("wire")
           if mod.split(".")[0] in PACKAGES and mod.split(".")[0] not in WIRE_MAY_IMPORT]
    assert not bad, "wire/ imports only itself and pipeline/ among the farm's rooms:\n" + "\n".join(bad)


PRODUCER_MAX_LINES = 1500


def test_producer_is_the_sdk_alone() -> None:
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for n, p in MODULES.items() if n.split(".")[0] == "producer")
    assert lines <= PRODUCER_MAX_LINES, f"producer/ is {lines} lines: the SDK alone, at most {PRODUCER_MAX_LINES}"
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}" for _, path, mod, line in _imports_of("producer")
           if mod.split(".")[0] in ("workers", "cli", "bench", *FRONT_ENDS)]
    assert not bad, "producer/ (the SDK) imports no worker, CLI, bench or front end, even lazily:\n" + "\n".join(bad)


def test_no_front_end_imports_workers() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for top in (*FRONT_ENDS, "cli", "bench") for _, path, mod, line in _imports_of(top) if mod.split(".")[0] == "workers"]
    assert not bad, "front ends, the CLI and the bench must not import workers/:\n" + "\n".join(bad)


# What a front end may take from producer/: the SDK: the client faces, the argument checks, encoding a chunk stream,
# and planning a submission (the gateway warms the text frontend with it).
FRONT_END_MAY_IMPORT = {"producer", "producer.client", "producer.aio", "producer.checks", "producer.encoded",
                        "producer.submit"}


def test_front_ends_take_only_the_sdk_from_producer() -> None:
    assert all((ROOT / pkg / "__init__.py").is_file() for pkg in FRONT_ENDS)
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for top in FRONT_ENDS for _, path, mod, line in _imports_of(top)
           if mod.split(".")[0] == "producer" and _project_module(mod) not in FRONT_END_MAY_IMPORT]
    assert not bad, "a front end uses the SDK only (FRONT_END_MAY_IMPORT):\n" + "\n".join(bad)
    for pkg in FRONT_ENDS:  # nor the broker's client library: the wire names what it raises (BrokerError)
        found = [f"{path.relative_to(ROOT)}:{line}" for _, path, mod, line in _imports_of(pkg) if mod.split(".")[0] == "redis"]
        assert not found, f"{pkg}/ imports redis; go through the wire or the SDK: {found}"


def _in_cli(name: str) -> bool:
    return name.split(".")[0] == "cli"


# What the CLI starts without being it: front ends (the gateway, gRPC, books) and the bench, each imported inside its
# command.
CLI_DISPATCHES = (*FRONT_ENDS, "bench")


def test_the_cli_imports_a_front_end_only_inside_its_command() -> None:
    eager = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
             for _, path, mod, line in _imports_of("cli", everywhere=False) if mod.split(".")[0] in CLI_DISPATCHES]
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
    """cli/ parses and dispatches: its ``__init__`` only builds the parser from the command groups and
    runs the command; a command's behaviour lives in its group's module, and Redis is reached through the SDK
    client (``Client.from_url``) and its broker's steps, never a connection, a key or a Redis command of its own."""
    cli = {name: path for name, path in MODULES.items() if _in_cli(name)}
    assert len(cli) > 1, "cli/ is a package: a module per command group"
    for name, path in cli.items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        assert lines <= CLI_MAX_LINES, f"{path.relative_to(ROOT)} is {lines} lines: split the command group"
        own = [f"{mod} (line {line})" for mod, line in _imports(name, _tree(path), everywhere=True)
               if mod.split(".")[0] in ("redis", "celery", "workers")
               or mod == "wire.keys" or mod.startswith("wire.redis")]
        assert not own, f"{path.relative_to(ROOT)} reaches the broker itself: {own}"
    dispatcher = MODULES["cli"]
    own = [f"{mod} (line {line})" for mod, line in _imports("cli", _tree(dispatcher), everywhere=True)
           if mod.split(".")[0] in PACKAGES and not _in_cli(mod) and mod.rpartition(".")[2] != "errors"]
    assert not own, f"cli/__init__.py only dispatches to the command groups: {own}"


def test_pipeline_imports_no_broker_or_storage_client() -> None:
    banned = {"redis", "celery", "boto3", "botocore", "kombu"}
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items() if name.split(".")[0] == "pipeline"
           for mod, line in _imports(name, _tree(path), everywhere=True)
           if mod.split(".")[0] in banned | {"wire", "producer", "cli", "workers", *FRONT_ENDS, "bench"}]
    assert not bad, "pipeline/ is pure compute:\n" + "\n".join(bad)


def test_pipeline_defines_no_farm_settings() -> None:
    farm = {"RedisSettings", "QueueSettings", "StorageSettings", "WorkerSettings", "GatewaySettings", "SchedulingSettings",
            "StreamingSettings", "Settings", "load_settings"}
    found = [f"{path.relative_to(ROOT)}: {node.name}"
             for name, path in MODULES.items() if name.split(".")[0] == "pipeline"
             for node in ast.walk(_tree(path)) if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name in farm]
    assert not found, "farm settings belong to wire/settings.py:\n" + "\n".join(found)
    farm_errors = {"JobError", "OverloadedError", "TransientError", "JobNotFoundError", "JobTimeoutError"}
    found = [f"{path.relative_to(ROOT)}: {node.name}"
             for name, path in MODULES.items() if name.split(".")[0] == "pipeline"
             for node in ast.walk(_tree(path)) if isinstance(node, ast.ClassDef) and node.name in farm_errors]
    assert not found, "farm errors belong to wire/errors.py:\n" + "\n".join(found)


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


# The brokers' implementations: reached from outside wire/ only through ``wire.connect`` (and the roles of
# ``wire.broker``), never imported or built there.
BACKEND_MODULES = ("wire.redis", "wire.stub", "wire.shards", "wire.shard_consumer")
BROKER_CLASSES = {"RedisBroker", "StubBroker", "ShardedBroker", "RedisConsumer", "StubConsumer", "ShardedConsumer"}
# An instrument, not a broker: the benches count a process's Redis round trips with it (``ttsfarm bench host``).
BACKEND_INSTRUMENTS = {"wire.redis.round_trips"}


def test_nothing_outside_the_wire_builds_a_broker() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items() if name.split(".")[0] != "wire"
           for mod, line in _imports(name, _tree(path), everywhere=True)
           if any(mod == m or mod.startswith(m + ".") for m in BACKEND_MODULES) and mod not in BACKEND_INSTRUMENTS]
    bad += [f"{path.relative_to(ROOT)}:{node.lineno} names {node.id}"
            for name, path in MODULES.items() if name.split(".")[0] != "wire"
            for node in ast.walk(_tree(path)) if isinstance(node, ast.Name) and node.id in BROKER_CLASSES]
    assert not bad, "a broker is built by wire.connect and used through its roles (wire.broker):\n" + "\n".join(bad)
    assert "BACKENDS" in (ROOT / "wire" / "connect.py").read_text(encoding="utf-8")


def test_the_benches_worker_module_is_started_by_name_only() -> None:
    """workers/bench_app.py wraps the farm's worker for the benches (its Redis round trips counted): benches and tests
    start it by name (``celery -A workers.bench_app worker``); no module imports it, so production never runs it."""
    assert (ROOT / "workers" / "bench_app.py").is_file()
    bad = [f"{path.relative_to(ROOT)}:{line}" for name, path in MODULES.items()
           for mod, line in _imports(name, _tree(path), everywhere=True) if mod == "workers.bench_app"]
    assert not bad, "workers.bench_app is a Celery app module the benches start by name, never an import:\n" + "\n".join(bad)


SCRIPTS_MAX_LINES = 1500


def test_scripts_hold_what_install_ci_and_the_product_run_and_nothing_edits_sys_path() -> None:
    """scripts/ is setup, the GPU check and the README generators (the lab is ``ttsfarm bench`` and ``bench.lab``);
    no file of the repository's code edits ``sys.path``: modules run as ``python -m``, from the root."""
    files = [p for p in (ROOT / "scripts").rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in files)
    assert lines <= SCRIPTS_MAX_LINES, f"scripts/ is {lines} lines: the lab belongs in bench/"
    code = [p for top in (*PACKAGES, "scripts", "tests") for p in (ROOT / top).rglob("*.py")]
    edits = [f"{p.relative_to(ROOT)}:{n}" for p in code
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"sys\.path\.(insert|append)\(", line)]
    assert not edits, "sys.path edited:\n" + "\n".join(edits)


# Docs a user reads: the README a newcomer reads in five minutes, the performance page short enough to answer.
DOC_MAX_LINES = {"README.md": 350, "docs/PERFORMANCE.md": 400}


def test_the_docs_a_user_reads_stay_short() -> None:
    for name, most in DOC_MAX_LINES.items():
        lines = len((ROOT / name).read_text(encoding="utf-8").splitlines())
        assert lines <= most, f"{name} is {lines} lines (at most {most}): reference goes to docs/, lab notes to docs/lab/"


# Who may import the broker's client library: the wire (its Broker implementation). Tests, bench/ and scripts/
# drive a real Redis themselves and stay outside this rule.
REDIS_OUTSIDE_THE_WIRE_EXEMPT = ("bench",)


def test_only_the_wire_imports_redis() -> None:
    bad = [f"{path.relative_to(ROOT)}:{line} imports {mod}"
           for name, path in MODULES.items()
           if not name.startswith("wire") and name.split(".")[0] not in REDIS_OUTSIDE_THE_WIRE_EXEMPT
           for mod, line in _imports(name, _tree(path), everywhere=True) if mod.split(".")[0] == "redis"]
    assert not bad, "only wire imports redis; go through the Broker or another wire module:\n" + "\n".join(bad)


# Entry points (a command's main, the Celery app module, the gateway's app factory) and the settings loader.
ENVIRON_ALLOWED = {
    "wire.settings": "the settings loader (settings_from_environment)",
    "cli.common": "`ttsfarm`'s settings: configs/ plus the environment and --redis",
    "books.cli": "`ttsfarm book` main",
    "gateway.app": "`ttsfarm gateway` main and the uvicorn app factory",
    "workers.app": "the Celery app module (`celery -A workers.app worker`)",
    "workers.bench_app": "the benches' counted worker (`celery -A workers.bench_app worker`): where to write its count",
    "bench.processes": "starts worker processes: their environment is this one's plus the farm's overrides",
    "bench.lab.storage": "`python -m bench.lab storage`: boto3's credential chain in this process gets the moto server's keys",
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
    from wire import errors as we

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
    homes = {"pipeline/errors.py", "wire/errors.py"}
    elsewhere = {code: places for code, places in where.items() if not any(p.split(":")[0] in homes for p in places)}
    assert not elsewhere, f"error codes defined outside pipeline/errors.py and wire/errors.py: {elsewhere}"
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
    assert ROOT / "README.md" in files and ROOT / "docs" / "PERFORMANCE.md" in files
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
