"""Runs the mutation check: ``python -m tests.mutants [--only NAME ...] [--list] [--no-baseline]``.

The tree is copied once into a scratch folder (no .git, no virtual environment, no caches); every anchor is
checked first; then, unless ``--no-baseline``, every mutant's tests run once unmutated (a test that fails without
its mutation proves nothing: its mutants are errors); then each mutant is applied to the copy, its tests run there
(``PYTHONPATH`` the copy, so the copy's code wins over an editable install), and the file is restored. A mutant is
caught when pytest reports a failed test (exit status 1), survived when its tests pass, and an error otherwise (an
anchor not found, a collection error, a timeout). Prints a line per mutant, then ``N caught, M survived`` (and the
errors); exits 0 only with none survived and no error.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.mutants import Mutant, all_mutants

ROOT = Path(__file__).resolve().parents[2]
IGNORED = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache", ".mypy_cache", ".hypothesis",
                                 "*.egg-info", "bench-results", "build", "dist", ".cache", "out")


def pytest(tree: Path, tests: list[str], timeout_s: float, *, first_failure: bool = True) -> tuple[int, str]:
    """pytest's exit status (124 on a timeout) and the end of its output, run in ``tree`` (stopping at the first
    failure with ``first_failure``)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", *(["-x"] if first_failure else []), "-p", "no:cacheprovider",
           "-o", "addopts=-rfE", *tests]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return 124, f"timed out after {timeout_s:.0f} s"
    return proc.returncode, (proc.stdout + proc.stderr)[-3000:]


def failed_tests(output: str) -> list[str]:
    return [line.split(" - ")[0].split(" ", 1)[1] for line in output.splitlines()
            if line.startswith(("FAILED ", "ERROR "))]


def run(mutants: list[Mutant], *, baseline: bool, timeout_s: float) -> int:
    scratch = Path(tempfile.mkdtemp(prefix="ttsfarm-mutants-"))
    tree = scratch / "tree"
    started = time.monotonic()
    try:
        shutil.copytree(ROOT, tree, ignore=IGNORED)
        errors: dict[str, str] = {}
        for m in mutants:
            try:
                m.apply((tree / m.path).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                errors[m.name] = str(exc)
        if baseline:
            wanted = sorted({t for m in mutants if m.name not in errors for t in m.tests})
            print(f"baseline: {len(wanted)} test selections, unmutated", flush=True)
            status, output = pytest(tree, wanted, timeout_s * 2, first_failure=False)
            if status != 0:
                broken = failed_tests(output) or ["(see its output)"]
                print(f"baseline failed ({status}): {', '.join(broken)}\n{output[-1500:]}", flush=True)
                for m in mutants:
                    if status != 1 or any(f.startswith(t) for f in broken for t in m.tests):
                        errors.setdefault(m.name, f"its tests fail without the mutation: {', '.join(broken)}")
        caught: list[str] = []
        survived: list[str] = []
        for i, m in enumerate(mutants, 1):
            head = f"[{i}/{len(mutants)}] {m.name}"
            if m.name in errors:
                print(f"{head}: ERROR {errors[m.name]}", flush=True)
                continue
            path = tree / m.path
            original = path.read_text(encoding="utf-8")
            path.write_text(m.apply(original), encoding="utf-8")
            t0 = time.monotonic()
            try:
                status, output = pytest(tree, list(m.tests), timeout_s)
            finally:
                path.write_text(original, encoding="utf-8")
            took = f"({time.monotonic() - t0:.0f} s)"
            if status == 1:
                caught.append(m.name)
                print(f"{head}: caught by {', '.join(failed_tests(output)) or '?'} {took}", flush=True)
            elif status == 0:
                survived.append(m.name)
                print(f"{head}: SURVIVED {took}: {m.breaks}", flush=True)
            else:
                errors[m.name] = f"pytest exit status {status}"
                print(f"{head}: ERROR pytest exit status {status} {took}\n{output[-1500:]}", flush=True)
        print(f"{len(caught)} caught, {len(survived)} survived, {len(errors)} errors "
              f"in {time.monotonic() - started:.0f} s", flush=True)
        return 0 if not survived and not errors else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=[], help="run these mutants only (by name)")
    ap.add_argument("--list", action="store_true", help="print each mutant, what it breaks and its tests; run nothing")
    ap.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the tests")
    ap.add_argument("--timeout-s", type=float, default=600.0, help="one mutant's tests at most this long")
    args = ap.parse_args(argv)
    mutants = all_mutants()
    if args.only:
        unknown = set(args.only) - {m.name for m in mutants}
        if unknown:
            ap.error(f"no such mutant: {', '.join(sorted(unknown))}")
        mutants = [m for m in mutants if m.name in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.name}  ({m.path})\n  breaks: {m.breaks}\n  tests: {' '.join(m.tests)}")
        return 0
    return run(mutants, baseline=not args.no_baseline, timeout_s=args.timeout_s)


if __name__ == "__main__":
    sys.exit(main())
