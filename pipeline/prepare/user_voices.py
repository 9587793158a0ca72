"""`ttsfarm voices add NAME MODEL.onnx` and `ttsfarm voices remove NAME`: a user's own Piper voice.

A voice is added to the user's own catalogue (``voices.toml`` in ``runtime.user_dir``, read after the shipped
one by ``wire.settings.load_settings``), never to the installed package. Adding it:

1. checks the files: an ONNX graph with Piper's inputs and output (``MODEL_CORRUPT`` otherwise: a truncated or
   foreign file), its ``.onnx.json`` beside it or named by ``--config`` (``MODEL_MISSING`` when absent,
   ``MODEL_CORRUPT`` when it does not read as a Piper config), a sample rate the farm encodes
   (``UNSUPPORTED_SAMPLE_RATE``), English (the farm's phonemizer for Piper voices: ``UNSUPPORTED_LANGUAGE``), and
   for a multi-speaker model the speaker (``--speaker``, a name of its ``speaker_id_map`` or a number; ``BAD_OPTION``);
2. copies the model and its config into ``<user_dir>/models/<NAME>/`` (a multi-speaker model with its speaker
   fixed in the graph, ``speakers.py``), so the voice does not depend on where the user's file was;
3. prepares it as the shipped Piper voice is prepared (``pipeline/prepare/piper.py``: split stages checked against
   the whole graph, INT8 where its gate passes, the listening gate) and refuses it when a gate that decides
   whether it may be served failed (``VOICE_GATE_FAILED``);
4. and only then writes its catalogue entry. A failure at any step leaves nothing behind.

Running workers pick it up on `ttsfarm voices reload` (they read the catalogue again, the user's too).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.audio import check_sample_rate
from pipeline.errors import (BAD_OPTION, MODEL_CORRUPT, MODEL_MISSING, UNKNOWN_VOICE, UNSUPPORTED_LANGUAGE, VOICE_GATE_FAILED,
                             InputError, ModelError)
from pipeline.prepare.registry import prepare_voice
from pipeline.prepare.speakers import fix_speaker
from pipeline.settings import PipelineSettings, VoiceSpec, parse_catalogue
from pipeline.voices.piper.graph import AUDIO, PIPER_INPUTS
from pipeline.voices.prepared import PrepareResult, voice_root

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,47}$")
SPEAKER_INPUT = "sid"  # a multi-speaker Piper graph's speaker id, int64 [B]
LANGUAGES = ("en",)  # what the farm phonemizes for a Piper voice (pipeline/text/en.py)
USER_DEFAULTS = {"max_batch": 16, "precision": "int8"}  # as the shipped Piper voice


@dataclass(frozen=True)
class PiperFiles:
    """A user's Piper model as checked: its files, what its config says, and the speaker chosen."""

    model: Path
    config: Path
    sample_rate: int
    language: str
    speaker: int | None  # the speaker id fixed in the graph (a multi-speaker model), else None
    speaker_name: str


def config_beside(model: Path) -> Path:
    return model.with_name(model.name + ".json")


def check_piper(model: Path, config: Path | None = None, speaker: str | None = None) -> PiperFiles:
    """The user's Piper files, checked (the coded errors are in the module docstring)."""
    import onnx

    if not model.is_file():
        raise ModelError(f"model file not found: {model}", code=MODEL_MISSING)
    config = config or config_beside(model)
    if not config.is_file():
        raise ModelError(f"no Piper config for {model.name}: {config} is missing (a Piper voice's .onnx.json; name "
                         "another with --config)", code=MODEL_MISSING)
    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except Exception as exc:  # protobuf's DecodeError, an OSError, ...: not a readable ONNX file
        raise ModelError(f"{model} is not a readable ONNX model ({type(exc).__name__}): truncated or not ONNX",
                         code=MODEL_CORRUPT) from None
    inputs = {i.name for i in graph.input} - {i.name for i in graph.initializer}
    if not set(PIPER_INPUTS) <= inputs or AUDIO not in {o.name for o in graph.output}:
        raise ModelError(f"{model} is not a Piper voice: inputs {sorted(inputs)}, outputs {[o.name for o in graph.output]} "
                         f"(Piper's: {', '.join(PIPER_INPUTS)} [+ {SPEAKER_INPUT}] -> {AUDIO})", code=MODEL_CORRUPT)
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
        rate = data["audio"]["sample_rate"]
        id_map = data["phoneme_id_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelError(f"{config} is not a Piper voice config (needs audio.sample_rate and phoneme_id_map): {exc}",
                         code=MODEL_CORRUPT) from None
    if not isinstance(id_map, dict) or not id_map:
        raise ModelError(f"{config}: phoneme_id_map is empty", code=MODEL_CORRUPT)
    rate = check_sample_rate(rate)
    language = str((data.get("language") or {}).get("family") or str((data.get("espeak") or {}).get("voice", "")).split("-")[0])
    if language not in LANGUAGES:
        raise InputError(f"{model.name} speaks {language or 'an unnamed language'!r}; a user's Piper voice can speak "
                         f"{', '.join(LANGUAGES)}", code=UNSUPPORTED_LANGUAGE)
    sid, speaker_name = choose_speaker(data, SPEAKER_INPUT in inputs, speaker, model.name)
    return PiperFiles(model=model, config=config, sample_rate=rate, language=language, speaker=sid, speaker_name=speaker_name)


def choose_speaker(config: dict[str, Any], has_sid: bool, speaker: str | None, what: str) -> tuple[int | None, str]:
    """The speaker id and name to fix for a multi-speaker model (``--speaker``: a name or a number)."""
    count = int(config.get("num_speakers", 1) or 1)
    names: dict[str, int] = {str(k): int(v) for k, v in (config.get("speaker_id_map") or {}).items()}
    if not has_sid or count <= 1:
        if speaker is not None:
            raise InputError(f"{what} has one speaker; --speaker is for multi-speaker voices", code=BAD_OPTION)
        return None, ""
    known = ", ".join(sorted(names, key=names.__getitem__)[:20]) or f"0..{count - 1}"
    if speaker is None:
        raise InputError(f"{what} has {count} speakers: choose one with --speaker (e.g. {known})", code=BAD_OPTION)
    if speaker in names:
        return names[speaker], speaker
    if speaker.isdigit() and int(speaker) < count:
        sid = int(speaker)
        return sid, next((n for n, i in names.items() if i == sid), str(sid))
    raise InputError(f"{what} has no speaker {speaker!r}; its speakers: {known}", code=BAD_OPTION)


def user_entry(files: PiperFiles, model: Path, config: Path) -> dict[str, Any]:
    """The catalogue entry of a user's Piper voice, served as the shipped one (two stages, prepared)."""
    entry: dict[str, Any] = {
        "engine": "twostage", "source": "piper", "languages": [files.language], "model": str(model), "config": str(config),
        "acoustic": "prepared", "vocoder": "prepared", "sample_rate": files.sample_rate, **USER_DEFAULTS,
        "license": "the user's own model", "user": True,
    }
    if files.speaker is not None:
        entry.update(speaker=files.speaker_name, speaker_id=files.speaker)
    return entry


def read_user_catalogue(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    return dict(tomllib.loads(path.read_text(encoding="utf-8")).get("voices", {}))


def write_user_catalogue(path: Path, voices: dict[str, dict[str, Any]]) -> None:
    """``voices.toml`` rewritten whole, then renamed into place (a worker reloading never reads half of it). The
    values are strings, numbers, booleans and lists of them: JSON spells those as TOML does."""
    lines = ["# The user's own voices, written by `ttsfarm voices add` / `ttsfarm voices remove`.", ""]
    for name, entry in sorted(voices.items()):
        lines.append(f"[voices.{name}]")
        lines += [f"{key} = {json.dumps(value, ensure_ascii=False)}" for key, value in entry.items() if not isinstance(value, dict)]
        for key, table in entry.items():
            if isinstance(table, dict):
                lines += [f"[voices.{name}.{key}]", *(f"{k} = {json.dumps(v)}" for k, v in table.items())]
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    tmp.replace(path)


def gate_failures(result: PrepareResult) -> list[str]:
    """What a prepared user voice failed that decides whether it may be served: the listening gate (and any other
    gate a verdict of a served stage records as failed)."""
    failed = []
    for (stage, precision), verdict in result.prepared.verdicts.items():
        for gate in ("recognizer", "naturalness"):
            figure = verdict.get(gate)
            if figure and not figure.get("passed", True):
                failed.append(f"{stage} {precision}: {gate} {figure.get('metric')} {figure.get('value')} "
                              f"(limit {figure.get('ceiling', figure.get('floor'))})")
    return sorted(set(failed))


Prepare = Callable[[VoiceSpec, PipelineSettings], PrepareResult]


def add_voice(settings: PipelineSettings, name: str, model: Path, *, config: Path | None = None, speaker: str | None = None,
              int8: bool = True, prepare: Prepare | None = None) -> PrepareResult:
    """Check, copy, prepare and gate a user's Piper voice, then list it in the user's catalogue."""
    if not NAME.match(name):
        raise InputError(f"voice name {name!r}: lower-case letters, digits, - and _, starting with a letter", code=BAD_OPTION)
    catalogue_file = settings.runtime.user_catalogue
    if name in settings.catalogue.voices or name in read_user_catalogue(catalogue_file):
        raise InputError(f"a voice named {name!r} exists already (`ttsfarm voices remove {name}` first, for a user's own)",
                         code=BAD_OPTION)
    files = check_piper(model.expanduser(), config.expanduser() if config else None, speaker)
    folder = Path(settings.runtime.user_dir).expanduser() / "models" / name
    shutil.rmtree(folder, ignore_errors=True)  # what a failed add of this name may have left
    folder.mkdir(parents=True)
    try:
        model_copy, config_copy = folder / f"{name}.onnx", folder / f"{name}.onnx.json"
        if files.speaker is None:
            shutil.copyfile(files.model, model_copy)
        else:
            fix_speaker(files.model, model_copy, files.speaker, SPEAKER_INPUT)
        shutil.copyfile(files.config, config_copy)
        entry = user_entry(files, model_copy, config_copy)
        spec = parse_catalogue({"voices": {name: entry}}).get(name)
        result = (prepare or (lambda s, st: prepare_voice(s, st, int8=int8, force=True)))(spec, settings)
        failed = gate_failures(result)
        if failed:
            raise ModelError(f"voice {name} failed its gates and was not added: {'; '.join(failed)}", code=VOICE_GATE_FAILED)
        write_user_catalogue(catalogue_file, {**read_user_catalogue(catalogue_file), name: entry})
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(voice_root(settings.runtime.cache_dir, name), ignore_errors=True)
        raise
    return result


def remove_voice(settings: PipelineSettings, name: str) -> Path:
    """Take a user's voice out of the user's catalogue, with its model files and its prepared folder; returns the
    catalogue file. A shipped voice is refused (``BAD_OPTION``), an unknown one is ``UNKNOWN_VOICE``."""
    catalogue_file = settings.runtime.user_catalogue
    voices = read_user_catalogue(catalogue_file)
    if name not in voices:
        if name in settings.catalogue.voices:
            raise InputError(f"{name} is a shipped voice, not one of the user's own: it cannot be removed", code=BAD_OPTION)
        raise InputError(f"no voice of the user's own is named {name!r} (in {catalogue_file})", code=UNKNOWN_VOICE)
    del voices[name]
    write_user_catalogue(catalogue_file, voices)
    shutil.rmtree(Path(settings.runtime.user_dir).expanduser() / "models" / name, ignore_errors=True)
    shutil.rmtree(voice_root(settings.runtime.cache_dir, name), ignore_errors=True)
    return catalogue_file
