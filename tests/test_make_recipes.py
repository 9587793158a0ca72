"""The README's two make commands, checked without running them (``make -n``): both run ``scripts/setup.sh`` first,
``make test`` then runs every test (no marker, keyword or path leaving some out), ``make demo`` runs ``ttsfarm -v
demo``. ``tests/test_readme_commands.py`` runs the demo itself and every other README command.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.readme_blocks import kind, readme_commands, words

ROOT = Path(__file__).resolve().parent.parent


def make_dry_run(cmd: str) -> list[str]:
    """The recipe lines a README ``make`` command would run (``make -n``: printed, nothing run)."""
    # under `make test` (CI) this make is a sub-make: without these it prints "make[1]: Entering directory" lines
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    done = subprocess.run(["make", "--no-print-directory", "-n", *words(cmd)[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


PYTEST_OUTPUT_FLAGS = {"-q", "-qq", "-v", "-vv", "-ra", "-rA", "--durations"}  # flags of `make test`'s pytest that
#                                                                                  leave no test out (with their values)
PYTEST_SPREAD_OPTIONS = {"-n", "--dist"}  # pytest-xdist's: how many processes run the tests and how they are dealt


def pytest_args(args: list[str]) -> tuple[list[str], list[str]]:
    """The paths and the flags of a pytest command line, the xdist options with their values taken out."""
    paths, flags, rest = [], [], iter(args)
    for a in rest:
        if a in PYTEST_SPREAD_OPTIONS:
            next(rest, None)
        elif a.startswith("-"):
            flags.append(a.split("=", 1)[0])
        else:
            paths.append(a)
    return paths, flags


def test_make_recipes() -> None:
    """What the README promises of its two make commands: both run ``scripts/setup.sh`` first; ``make test`` then
    runs every test (this suite: pytest over tests/, no marker, keyword or path leaving some out), checked here
    without running it; ``make demo`` then runs ``ttsfarm -v demo`` (run by ``test_make_demo``)."""
    recipes = {kind(cmd): make_dry_run(cmd) for cmd in readme_commands() if kind(cmd) in ("make demo", "make test")}
    assert set(recipes) == {"make demo", "make test"}, recipes
    for lines in recipes.values():
        assert lines[0] == "./scripts/setup.sh", lines
    setup, *run = recipes["make test"]
    assert len(run) == 1, run
    argv = shlex.split(run[0])
    assert argv[:3] == [".venv/bin/python", "-m", "pytest"], argv
    paths, flags = pytest_args(argv[3:])
    assert set(flags) <= PYTEST_OUTPUT_FLAGS, f"`make test` leaves tests out or stops early: {flags}"
    if paths:
        assert [p.rstrip("/") for p in paths] == ["tests"], paths
    else:  # pytest then collects its testpaths
        testpaths = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["testpaths"]
        assert testpaths == ["tests"], testpaths
    assert recipes["make demo"][-1] == ".venv/bin/ttsfarm -v demo", recipes["make demo"]


@pytest.mark.parametrize("recipe", ['.venv/bin/python -m pytest -q -m "not slow"', ".venv/bin/python -m pytest -q -x",
                                    ".venv/bin/python -m pytest -q tests/test_cli.py",
                                    ".venv/bin/python -m pytest -q -n 3 --dist loadfile -k farm"])
def test_a_make_test_recipe_that_leaves_tests_out_fails_the_check(recipe: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    makefile = (ROOT / "Makefile").read_text()
    shipped = "\t.venv/bin/python -m pytest -q -n 3 --dist loadfile --durations=30\n"
    assert shipped in makefile
    (tmp_path / "Makefile").write_text(makefile.replace(shipped, f"\t{recipe}\n", 1))
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "readme_commands", lambda: ["make demo", "make test"])
    with pytest.raises(AssertionError):
        test_make_recipes()
