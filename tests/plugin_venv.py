"""A virtual environment of its own for each distribution under ``integrations/``: the framework at the versions its
``test`` extra pins, the distribution itself, nothing of the farm.

Installing a framework takes about a minute (livekit-agents 51 s, pipecat-ai 56 s on the 2-core development machine,
2026-12-07), more than CI's budget can give each run, so the environment is built once, outside the checkout
(``~/.cache/ttsfarm/plugin-venvs``, or ``TTSFARM_PLUGIN_VENVS``), under a name that changes with the distribution's
``pyproject.toml`` and the Python version: a later run finds it and only reinstalls the distribution itself (without
its dependencies, a few seconds), so the tests always run the checkout's code.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPE = "setuptools>=61 wheel"  # what the build below adds beside the test extra; part of the cache's key
CACHE = Path(os.environ.get("TTSFARM_PLUGIN_VENVS") or Path.home() / ".cache" / "ttsfarm" / "plugin-venvs")


@dataclass(frozen=True)
class PluginVenv:
    python: Path
    source: Path
    built_s: float | None  # seconds this call spent building it; None when it was there already
    refresh_s: float  # seconds reinstalling the distribution from the checkout


def _pip(python: Path, *args: str) -> None:
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, env=clean_env())
    if done.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without the farm's paths, so that nothing of the farm can be imported by accident."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


def plugin_venv(name: str) -> PluginVenv:
    """The environment of ``integrations/<name>``, built when absent, with the checkout's distribution installed."""
    source = ROOT / "integrations" / name
    key = hashlib.sha256((source / "pyproject.toml").read_bytes() + sys.version.encode() + RECIPE.encode()).hexdigest()[:12]
    home = CACHE / f"{name}-{key}"
    python = home / "bin" / "python"
    CACHE.mkdir(parents=True, exist_ok=True)
    built_s = None
    with open(CACHE / f"{name}.lock", "w") as lock:  # two test processes never build the same one at once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / ".ready").exists():
            started = time.monotonic()
            shutil.rmtree(home, ignore_errors=True)
            venv.create(home, with_pip=True)
            _pip(python, *RECIPE.split(), f"{source}[test]")
            built_s = time.monotonic() - started
            (home / ".ready").write_text(f"{built_s:.1f}\n")
        started = time.monotonic()
        _pip(python, "--no-deps", "--no-build-isolation", "--force-reinstall", str(source))
        refresh_s = time.monotonic() - started
    for made in (source / "build", *source.glob("*.egg-info")):  # what the in-tree build leaves
        shutil.rmtree(made, ignore_errors=True)
    return PluginVenv(python, source, built_s, refresh_s)
