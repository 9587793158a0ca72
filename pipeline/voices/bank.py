"""The voices of one process: routing a language run to a voice, loading each voice once, warm-up."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pipeline.errors import UNKNOWN_VOICE, UNSUPPORTED_LANGUAGE, VOICE_UNAVAILABLE, InputError, ModelError, TTSFarmError
from pipeline.settings import Catalogue, RuntimeSettings, VoiceSpec
from pipeline.voices.base import SynthesisOptions, Voice
from pipeline.voices.prepared import MANIFEST, folder_stamp, gate_failure, prepared_dir
from pipeline.voices.runtime import SessionFactory, StageState
from pipeline.voices.twostage import needs_preparation, prepared_fingerprint

log = logging.getLogger(__name__)

WARMUP_TEXT = {"en": "Warming up the voice.", "zh": "你好，世界。"}


def route(catalogue: Catalogue, voice: str | None, lang: str, cache_dir: Path | None = None) -> VoiceSpec:
    """The concrete voice that speaks ``lang`` for a request naming ``voice`` (a voice or a blend).

    A blend's route is a voice or a list of them: the first not held back (``held_back``: read from the prepared
    folders under ``cache_dir``; without one, the first), else the last."""
    spec = catalogue.get(voice)
    if spec.engine == "blend":
        routes = dict(spec.options.get("routes", {}))
        if lang not in routes:
            raise InputError(f"voice {spec.name} has no route for language {lang!r}", code=UNSUPPORTED_LANGUAGE)
        spec = catalogue.get(gated_choice(routes[lang], cache_dir, catalogue))
    if lang not in spec.languages:
        speaks = ", ".join(spec.languages)
        raise InputError(f"voice {spec.name} speaks {speaks}, not {lang!r}", code=UNSUPPORTED_LANGUAGE)
    return spec


def held_back(name: str, cache_dir: Path, catalogue: Catalogue | None = None) -> str:
    """Why a blend does not route to ``name`` ("" when nothing says so): a voice only `ttsfarm voices prepare` builds
    (``twostage.needs_preparation``) whose folder for its current sources is not there (never prepared, prepared
    from other sources or by another preparer version, or its source package missing), or one whose recorded
    listening gate failed."""
    spec = catalogue.voices.get(name) if catalogue is not None else None
    stamp = folder_stamp(cache_dir, name)
    if spec is not None and needs_preparation(spec):
        why = _unprepared(spec, cache_dir, stamp)
        if why:
            return why
    return gate_failure(cache_dir, name, stamp)


_UNPREPARED: dict[tuple[str, str, str, str, int], str] = {}


def _unprepared(spec: VoiceSpec, cache_dir: Path, stamp: int) -> str:
    """Whether the folder serving reads for ``spec`` is missing, and why. Its fingerprint hashes the source files (for
    baker 24 MB, about 50 ms), so the answer is kept per voice folder state: once per process until a preparation."""
    key = (spec.name, spec.source, spec.model, str(cache_dir), stamp)
    if key not in _UNPREPARED:
        try:
            folder = prepared_dir(cache_dir, spec.name, prepared_fingerprint(spec))
            why = "" if (folder / MANIFEST).is_file() else f"not prepared (run `ttsfarm voices prepare {spec.name}`)"
        except ModelError as exc:
            why = f"not preparable here yet: {exc.message}; `ttsfarm voices prepare {spec.name}` installs what is missing"
        _UNPREPARED[key] = why
    return _UNPREPARED[key]


def gated_choice(choices: str | Sequence[str], cache_dir: Path | None, catalogue: Catalogue | None = None) -> str:
    names = [choices] if isinstance(choices, str) else [str(c) for c in choices]
    if cache_dir is None:
        return names[0]
    for name, after in zip(names, names[1:]):
        why = held_back(name, cache_dir, catalogue)
        if not why:
            return name
        _warn_once(name, why, after)
    return names[-1]


@functools.lru_cache(maxsize=64)
def _warn_once(name: str, why: str, after: str) -> None:
    log.warning("voice %s is not routed to by default: %s; the route goes on to %s", name, why, after)


def output_rate(catalogue: Catalogue, voice: str | None) -> int:
    """The sample rate a request for ``voice`` comes out at (a blend resamples its parts to it)."""
    spec = catalogue.get(voice)
    if spec.sample_rate <= 0:
        raise InputError(f"voice {spec.name} has no sample_rate in the catalogue", code=UNKNOWN_VOICE)
    return spec.sample_rate


def _build(spec: VoiceSpec, factory: SessionFactory) -> Voice:
    if spec.engine == "piper":
        from pipeline.voices.piper.voice import PiperVoice

        return PiperVoice(spec, factory)
    if spec.engine == "kokoro":
        from pipeline.voices.kokoro.voice import KokoroVoice

        return KokoroVoice(spec, factory)
    if spec.engine == "twostage":
        from pipeline.voices.twostage import build_two_stage

        return build_two_stage(spec, factory)
    raise InputError(f"voice {spec.name}: engine {spec.engine!r} cannot synthesize by itself", code=UNKNOWN_VOICE)


class VoiceBank:
    """Loads each concrete voice once per process (thread-safe) and warms it up before first use."""

    def __init__(
        self,
        catalogue: Catalogue,
        runtime: RuntimeSettings,
        *,
        builder: Callable[[VoiceSpec, SessionFactory], Voice] = _build,
    ) -> None:
        self.catalogue = catalogue
        self.runtime = runtime
        self.factory = SessionFactory(runtime)
        self._builder = builder
        self._voices: dict[str, Voice] = {}
        self._warm: set[tuple[int, ...]] = set()  # sessions already warmed up (voices may share them)
        self._lock = threading.Lock()
        self._reload_lock = threading.Lock()
        self.versions: dict[str, int] = {}  # 1 when first loaded, +1 per reload
        self.failed: dict[str, TTSFarmError] = {}  # voices that could not be built or loaded (load_all(tolerant=True))

    def route(self, voice: str | None, lang: str) -> VoiceSpec:
        return route(self.catalogue, voice, lang, self.runtime.cache_dir)

    def output_rate(self, voice: str | None) -> int:
        return output_rate(self.catalogue, voice)

    def get(self, name: str, *, load: bool = True) -> Voice:
        """The voice named ``name``; with ``load`` its session is created and warmed up too. A voice that failed to
        load is ``VOICE_UNAVAILABLE`` (an input error: the job cannot be served here), with the load error's code."""
        failed = self.failed.get(name)
        if failed is not None:
            raise InputError(f"voice {name} is not available on this worker: {failed.code}: {failed.message}",
                             code=VOICE_UNAVAILABLE)
        with self._lock:
            voice = self._voices.get(name)
            if voice is None:
                voice = self._builder(self.catalogue.get(name), self.factory)
                self._voices[name] = voice
                self.versions.setdefault(name, 1)
        if load and not _loaded(voice):
            with self._lock:
                self._load(voice)
        return voice

    def _load(self, voice: Voice) -> None:
        if _loaded(voice):
            return
        voice.load()  # type: ignore[attr-defined]
        key = _session_key(voice)
        if self.runtime.warmup and key not in self._warm:
            self._warm.add(key)
            self._warm_up(voice)

    def _warm_up(self, voice: Voice) -> None:
        start = time.perf_counter()
        lang = voice.languages[0]
        ids = voice.phonemize(WARMUP_TEXT.get(lang, WARMUP_TEXT["en"]), lang).ids
        voice.synthesize_batch([ids] * min(2, voice.max_batch), SynthesisOptions.noiseless())
        log.info("voice %s warmed up in %.2f s", voice.name, time.perf_counter() - start)

    def reload(self, catalogue: Catalogue, names: Sequence[str] | None = None) -> dict[str, int]:
        """Hot reload: build each named voice (default: every concrete voice of ``catalogue``, and those no longer in
        it are dropped) again from ``catalogue``, each with a fresh session, warm them up, then swap them all in at once.

        Until the swap the old voices serve; a batch that took its voice before the swap finishes on the
        old one (it holds the object), and the next batch gets the new one. If any voice fails to build,
        nothing is swapped and the error propagates. Returns the new version of each reloaded voice.
        """
        with self._reload_lock:
            wanted = list(names) if names else [n for n, spec in catalogue.voices.items() if spec.engine != "blend"]
            specs = {name: catalogue.get(name) for name in wanted}  # UNKNOWN_VOICE before any work
            factory = SessionFactory(self.runtime)  # an empty session cache: fresh sessions, shared among these
            fresh: dict[str, Voice] = {}
            warmed: set[tuple[int, ...]] = set()
            for name, spec in specs.items():
                voice = self._builder(spec, factory)
                voice.load()  # type: ignore[attr-defined]
                key = _session_key(voice)
                if self.runtime.warmup and key not in warmed:
                    warmed.add(key)
                    self._warm_up(voice)
                fresh[name] = voice
            with self._lock:
                kept = self.catalogue.voices
                if not names:  # a whole reload: a voice taken out of the catalogue (`ttsfarm voices remove`) stops serving
                    kept = {n: s for n, s in kept.items() if n in catalogue.voices}
                    for gone in set(self._voices) - set(catalogue.voices):
                        del self._voices[gone]
                merged = {**kept, **specs}
                self.catalogue = Catalogue(voices=merged, default_voice=self.catalogue.default_voice)
                self._voices.update(fresh)
                for name in fresh:
                    self.failed.pop(name, None)  # a voice that failed before serves from now on
                for name in fresh:
                    self.versions[name] = self.versions.get(name, 0) + 1
                return {name: self.versions[name] for name in fresh}

    def describe(self) -> dict[str, dict[str, Any]]:
        """Per loaded voice: version, precision, model file(s), session id(s), create time and the execution provider
        its sessions run on (heartbeat, metrics), and per stage its file and the precision really served. A voice
        of several stages lists its files joined by ``+`` and the sum of their create times."""
        with self._lock:
            voices = dict(self._voices)
            versions = dict(self.versions)
        out: dict[str, dict[str, Any]] = {}
        for name, voice in voices.items():
            stages = _stages(voice)
            infos = [st.info for st in stages.values() if st.info is not None]
            out[name] = {"version": versions.get(name, 1), "precision": getattr(voice, "precision", ""),
                         "model": "+".join(i.model.name for i in infos),
                         "create_s": round(sum(i.create_s for i in infos), 4) if infos else None,
                         "session": "+".join(f"{id(st.session):x}" for st in stages.values() if st.session is not None),
                         "provider": infos[0].providers[0] if infos and infos[0].providers else "",
                         "stages": {stage: {"model": st.model.name, "precision": st.precision} for stage, st in stages.items()}}
        return out

    def concrete_names(self) -> list[str]:
        return [name for name, spec in self.catalogue.voices.items() if spec.engine != "blend"]

    def load_all(self, *, tolerant: bool = False) -> dict[str, TTSFarmError]:
        """Build, load and warm every concrete voice. ``tolerant``: a voice that fails is recorded in ``failed``
        (its jobs get ``VOICE_UNAVAILABLE``) and the others still load; otherwise the first failure raises."""
        for name in self.concrete_names():
            if name in self.failed:  # recorded by an earlier call: stays failed until a hot reload builds it
                continue
            try:
                self.get(name)
            except TTSFarmError as exc:
                if not tolerant:
                    raise
                log.error("voice %s failed to load: %s", name, exc)
                self.failed[name] = exc
        return dict(self.failed)

    def loaded(self) -> dict[str, Voice]:
        with self._lock:
            return dict(self._voices)


def _loaded(voice: Voice) -> bool:
    """Whether the voice's sessions exist (a voice without lazy sessions always counts as loaded)."""
    return bool(getattr(voice, "loaded", True))


def _stages(voice: Voice) -> dict[str, StageState]:
    stage_sessions = getattr(voice, "stage_sessions", None)
    return stage_sessions() if stage_sessions is not None else {}


def _session_key(voice: Voice) -> tuple[int, ...]:
    """Identifies the sessions a voice runs on: voices sharing all of them are warmed up once."""
    return tuple(id(st.session) for st in _stages(voice).values()) or (id(voice),)
