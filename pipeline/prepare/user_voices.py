"""`ttsfarm voices add NAME MODEL.onnx` and `ttsfarm voices remove NAME`: a user's own Piper voice.

A voice is added to the user's own catalogue (``voices.toml`` in ``runtime.user_dir``, read after the shipped
one by ``wire.settings.load_settings``), never to the installed package. Adding it:

1. checks the files: an ONNX graph with Piper's inputs and output (``MODEL_CORRUPT`` otherwise: a truncated or
   foreign file), its ``.onnx.json`` beside it or named by ``--config`` (``MODEL_MISSING`` when absent,
   ``MODEL_CORRUPT`` when it does not read as a Piper config), a sample rate the farm encodes
   (``UNSUPPORTED_SAMPLE_RATE``), English (the farm's phonemizer for Piper voices: ``UNSUPPORTED_LANGUAGE``), and
   for a multi-speaker model the speakers (``--speaker``, repeatable: a name of its ``speaker_id_map`` or a number;
   ``BAD_OPTION`` without one). Each speaker becomes a voice of its own, its name ``<NAME>-<speaker>``: an alias per
   speaker, so a request names a speaker the way it names any voice;
2. copies the model and its config into ``<user_dir>/models/<voice>/`` (a multi-speaker model with its speaker
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
from collections.abc import Callable, Sequence
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
    speakers: dict[str, int]  # a multi-speaker model's speakers by name (a number where its config names none); {}: one


@dataclass(frozen=True)
class Speaker:
    """One speaker of a multi-speaker model, a voice of its own: ``<NAME>-<alias>``."""

    id: int
    name: str

    @property
    def alias(self) -> str:
        return re.sub(r"[^a-z0-9_]+", "_", self.name.lower()).strip("_") or str(self.id)


def config_beside(model: Path) -> Path:
    return model.with_name(model.name + ".json")


def check_piper(model: Path, config: Path | None = None) -> PiperFiles:
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
    count = int(data.get("num_speakers", 1) or 1)
    speakers: dict[str, int] = {}
    if SPEAKER_INPUT in inputs and count > 1:
        speakers = {str(k): int(v) for k, v in (data.get("speaker_id_map") or {}).items()}
        named = set(speakers.values())
        speakers.update({str(i): i for i in range(count) if i not in named})
    return PiperFiles(model=model, config=config, sample_rate=rate, language=language, speakers=speakers)


def choose_speakers(files: PiperFiles, wanted: Sequence[str]) -> list[Speaker | None]:
    """The speakers to make voices of (``--speaker``, repeatable: a name or a number); ``[None]`` for a model of one."""
    what = files.model.name
    if not files.speakers:
        if wanted:
            raise InputError(f"{what} has one speaker; --speaker is for multi-speaker voices", code=BAD_OPTION)
        return [None]
    by_id = {i: n for n, i in sorted(files.speakers.items(), key=lambda kv: kv[0].isdigit())}  # a name over its number
    known = ", ".join(by_id[i] for i in sorted(by_id)[:20]) + (", ..." if len(by_id) > 20 else "")
    if not wanted:
        raise InputError(f"{what} has {len(by_id)} speakers: choose with --speaker (repeatable; each becomes a voice "
                         f"NAME-SPEAKER): {known}", code=BAD_OPTION)
    chosen = []
    for speaker in wanted:
        sid = files.speakers.get(speaker, int(speaker) if speaker.isdigit() else -1)
        if sid not in by_id:
            raise InputError(f"{what} has no speaker {speaker!r}; its speakers: {known}", code=BAD_OPTION)
        chosen.append(Speaker(sid, by_id[sid]))
    aliases = [c.alias for c in chosen]
    if len(set(aliases)) != len(aliases):
        raise InputError(f"--speaker names one speaker twice: {', '.join(wanted)}", code=BAD_OPTION)
    return list(chosen)


def user_entry(files: PiperFiles, model: Path, config: Path, family: str, speaker: Speaker | None) -> dict[str, Any]:
    """The catalogue entry of a user's Piper voice, served as the shipped one (two stages, prepared)."""
    entry: dict[str, Any] = {
        "engine": "twostage", "source": "piper", "languages": [files.language], "model": str(model), "config": str(config),
        "acoustic": "prepared", "vocoder": "prepared", "sample_rate": files.sample_rate, **USER_DEFAULTS,
        "license": "the user's own model", "user": True, "family": family,
    }
    if speaker is not None:
        entry.update(speaker=speaker.name, speaker_id=speaker.id)
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


def add_voice(settings: PipelineSettings, name: str, model: Path, *, config: Path | None = None,
              speakers: Sequence[str] = (), int8: bool = True, prepare: Prepare | None = None) -> list[PrepareResult]:
    """Check, copy, prepare and gate a user's Piper voice, then list it in the user's catalogue: ``name``, or for a
    multi-speaker model one voice per chosen speaker, ``<name>-<speaker>``. All or nothing."""
    if not NAME.match(name):
        raise InputError(f"voice name {name!r}: lower-case letters, digits, - and _, starting with a letter", code=BAD_OPTION)
    files = check_piper(model.expanduser(), config.expanduser() if config else None)
    chosen = choose_speakers(files, speakers)
    voices = {(name if s is None else f"{name}-{s.alias}"): s for s in chosen}
    catalogue_file = settings.runtime.user_catalogue
    existing = read_user_catalogue(catalogue_file)
    for voice in voices:
        if voice in settings.catalogue.voices or voice in existing:
            raise InputError(f"a voice named {voice!r} exists already (`ttsfarm voices remove {voice}` first, for a "
                             "user's own)", code=BAD_OPTION)
    prepare = prepare or (lambda spec, st: prepare_voice(spec, st, int8=int8, force=True))
    models = Path(settings.runtime.user_dir).expanduser() / "models"
    entries, results = {}, []
    try:
        for voice, speaker in voices.items():
            folder = models / voice
            shutil.rmtree(folder, ignore_errors=True)  # what a failed add of this name may have left
            folder.mkdir(parents=True)
            model_copy, config_copy = folder / f"{voice}.onnx", folder / f"{voice}.onnx.json"
            if speaker is None:
                shutil.copyfile(files.model, model_copy)
            else:
                fix_speaker(files.model, model_copy, speaker.id, SPEAKER_INPUT)
            shutil.copyfile(files.config, config_copy)
            entries[voice] = user_entry(files, model_copy, config_copy, name, speaker)
            result = prepare(parse_catalogue({"voices": {voice: entries[voice]}}).get(voice), settings)
            failed = gate_failures(result)
            if failed:
                raise ModelError(f"voice {voice} failed its gates and was not added: {'; '.join(failed)}", code=VOICE_GATE_FAILED)
            results.append(result)
        write_user_catalogue(catalogue_file, {**read_user_catalogue(catalogue_file), **entries})
    except BaseException:
        for voice in voices:
            shutil.rmtree(models / voice, ignore_errors=True)
            shutil.rmtree(voice_root(settings.runtime.cache_dir, voice), ignore_errors=True)
        raise
    return results


def remove_voice(settings: PipelineSettings, name: str) -> list[str]:
    """Take a user's voice out of the user's catalogue, with its model files and its prepared folder (``name`` as
    given to `voices add` takes every speaker's voice of a multi-speaker model); returns the voices removed. A shipped
    voice is refused (``BAD_OPTION``), an unknown one is ``UNKNOWN_VOICE``."""
    catalogue_file = settings.runtime.user_catalogue
    voices = read_user_catalogue(catalogue_file)
    gone = [v for v, entry in voices.items() if v == name or entry.get("family") == name]
    if not gone:
        if name in settings.catalogue.voices:
            raise InputError(f"{name} is a shipped voice, not one of the user's own: it cannot be removed", code=BAD_OPTION)
        raise InputError(f"no voice of the user's own is named {name!r} (in {catalogue_file})", code=UNKNOWN_VOICE)
    write_user_catalogue(catalogue_file, {v: e for v, e in voices.items() if v not in gone})
    for voice in gone:
        shutil.rmtree(Path(settings.runtime.user_dir).expanduser() / "models" / voice, ignore_errors=True)
        shutil.rmtree(voice_root(settings.runtime.cache_dir, voice), ignore_errors=True)
    return sorted(gone)
