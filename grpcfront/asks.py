"""What a Riva ``SynthesizeSpeechRequest`` asks of the farm, read field by field.

Every field is checked here, before anything is queued; a value the farm cannot serve is an ``InputError``
(answered ``INVALID_ARGUMENT``) whose message starts with the field's name:

- ``text``: plain text, or SSML (our subset, ``<speak>`` first) as the SDK reads it;
- ``language_code``: ``en-US``, ``zh-CN`` (any region; ``cmn`` reads as ``zh``): with no ``voice_name`` it picks the
  default voice if that speaks the language, else the first catalogue voice that does; with one, that voice must
  speak it;
- ``voice_name``: a catalogue voice, a Riva-style alias (``grpc.voice_aliases``: ``English-US.Male-1``), or a
  catalogue voice under its language's Riva prefix (``English-US.joe``: what ``GetRivaSynthesisConfig`` lists);
- ``encoding``: ``LINEAR_PCM`` (or unspecified), ``OGGOPUS``; ``FLAC`` for ``Synthesize`` only;
- ``sample_rate_hz``: one of the farm's rates (0: the voice's own); the workers resample;
- ``custom_dictionary``: Riva's ``"word  phonemes,word  phonemes"`` (IPA, or pinyin for Chinese) -> the request's
  lexicon;
- ``enable_word_time_offsets``: word timings in each response's ``meta.words`` (milliseconds in the audio);
- ``zero_shot_data`` and ``custom_configuration``: not served.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from riva.client.proto import riva_audio_pb2

from pipeline.audio import check_sample_rate
from pipeline.errors import (
    BAD_INPUT,
    BAD_LEXICON,
    BAD_OPTION,
    UNKNOWN_VOICE,
    UNSUPPORTED_FORMAT,
    UNSUPPORTED_LANGUAGE,
    UNSUPPORTED_SAMPLE_RATE,
    InputError,
    TTSFarmError,
)
from wire.settings import GrpcSettings, Settings

ENCODINGS = {riva_audio_pb2.ENCODING_UNSPECIFIED: "pcm", riva_audio_pb2.LINEAR_PCM: "pcm",
             riva_audio_pb2.OGGOPUS: "ogg", riva_audio_pb2.FLAC: "flac"}
STREAMED = ("pcm", "ogg")  # what SynthesizeOnline sends as it is made
LANGUAGE_TAGS = {"en": "en-US", "zh": "zh-CN"}  # a catalogue language as Riva names it
RIVA_PREFIXES = {"en": "English-US", "zh": "Mandarin-CN"}  # the first part of a Riva voice name
# The request fields whose value must not change between the messages of one SynthesizeOnline stream.
CONFIG_FIELDS = ("language_code", "encoding", "sample_rate_hz", "voice_name", "custom_dictionary",
                 "enable_word_time_offsets")


@dataclass(frozen=True)
class Asked:
    """A request as the farm's terms: the voice, the output (``fmt`` and ``sample_rate``; None: the voice's)."""

    voice: str
    fmt: str
    sample_rate: int | None
    lexicon: dict[str, str] | None
    word_offsets: bool

    def submit_kwargs(self) -> dict[str, Any]:
        """``AsyncClient.submit``'s keywords: the farm's stream is PCM16; other encodings are made here."""
        return {"voice": self.voice, "format": "pcm", "sample_rate": self.sample_rate, "lane": "interactive",
                "lexicon": self.lexicon}


# The request field behind each input code the SDK's submit may answer (the SDK names its own arguments).
FIELD_OF_CODE = {BAD_LEXICON: "custom_dictionary", UNSUPPORTED_SAMPLE_RATE: "sample_rate_hz", UNKNOWN_VOICE: "voice_name",
                 UNSUPPORTED_LANGUAGE: "language_code"}


def submit_error(exc: InputError) -> InputError:
    """An input error of the SDK's submit, with the Riva field it concerns named first (``text`` unless the code
    belongs to another field)."""
    return field_error(FIELD_OF_CODE.get(exc.code, "text"), exc)


def field_error(name: str, exc: TTSFarmError) -> InputError:
    """``exc`` with the request field that caused it named first."""
    return InputError(f"{name}: {exc.message}", code=exc.code)


def read_request(req: Any, settings: Settings, front: GrpcSettings, *, streaming: bool) -> Asked:
    """The farm's terms for ``req``, or ``InputError`` naming the first field the farm cannot serve."""
    check_unserved(parsed(req))
    fmt = ENCODINGS.get(req.encoding)
    if fmt is None or (streaming and fmt not in STREAMED):
        name = riva_audio_pb2.AudioEncoding.Name(req.encoding) if req.encoding in riva_audio_pb2.AudioEncoding.values() \
            else str(req.encoding)
        served = "LINEAR_PCM, OGGOPUS" + ("" if streaming else ", FLAC")
        raise InputError(f"encoding: {name} is not served{' as a stream' if streaming and fmt else ''}; served: {served}",
                         code=UNSUPPORTED_FORMAT)
    rate = None
    if req.sample_rate_hz:
        try:
            rate = check_sample_rate(req.sample_rate_hz)
        except InputError as exc:
            raise field_error("sample_rate_hz", exc) from None
    return Asked(voice=choose_voice(req.voice_name, req.language_code, settings, front), fmt=fmt, sample_rate=rate,
                 lexicon=read_dictionary(req.custom_dictionary), word_offsets=bool(req.enable_word_time_offsets))


@dataclass(frozen=True)
class Malformed:
    """A message that did not parse as its type (``lenient``): answered INVALID_ARGUMENT BAD_INPUT, where gRPC's own
    deserializer would answer UNKNOWN."""

    kind: str
    error: str


def lenient(message_cls: Any) -> Any:
    """A request deserializer for ``message_cls`` that returns ``Malformed`` for bytes that do not parse."""
    def parse(data: bytes) -> Any:
        try:
            return message_cls.FromString(data)
        except DecodeError as exc:
            return Malformed(message_cls.DESCRIPTOR.name, str(exc))
    return parse


def parsed(req: Any) -> Any:
    """``req``, or ``InputError`` BAD_INPUT when it did not parse."""
    if isinstance(req, Malformed):
        raise InputError(f"request: not a valid {req.kind} ({req.error[:200]})", code=BAD_INPUT)
    return req


def check_unserved(req: Any) -> None:
    """The fields no request may set here."""
    if req.HasField("zero_shot_data"):
        raise InputError("zero_shot_data: zero-shot voices (an audio prompt) are not served by this farm", code=BAD_OPTION)
    if req.custom_configuration:
        key = sorted(req.custom_configuration)[0]
        raise InputError(f"custom_configuration: the key {key[:64]!r} is not served (this farm takes none)",
                         code=BAD_OPTION)


def same_config(first: Any, later: Any) -> None:
    """A later message of a stream may only carry more text: any other field it sets must equal the first's."""
    parsed(later)
    for name in CONFIG_FIELDS:
        value = getattr(later, name)
        if value and value != getattr(first, name):
            raise InputError(f"{name}: a later message of the stream changed it; only text may follow the first",
                             code=BAD_OPTION)
    check_unserved(later)


def language_of(code: str) -> str | None:
    """``en-US`` -> ``en``; '' -> None; a language no catalogue names -> ``InputError`` naming ``language_code``."""
    tag = code.strip().replace("_", "-").lower()
    if not tag:
        return None
    primary = tag.split("-")[0]
    primary = {"cmn": "zh"}.get(primary, primary)
    if primary not in LANGUAGE_TAGS:
        raise InputError(f"language_code: {code[:32]!r} is not served; served: {', '.join(LANGUAGE_TAGS.values())}",
                         code=UNSUPPORTED_LANGUAGE)
    return primary


def choose_voice(name: str, language_code: str, settings: Settings, front: GrpcSettings) -> str:
    """The catalogue voice for ``voice_name`` (a voice, any case, or an alias) and ``language_code``."""
    catalogue = settings.catalogue
    language = language_of(language_code)
    key = name.strip()
    if not key:
        default = catalogue.get(None)
        if language is None or language in default.languages:
            return default.name
        speaking = [v.name for v in catalogue.voices.values() if language in v.languages]
        if not speaking:
            raise InputError(f"language_code: no voice of this farm speaks {language_code!r}", code=UNSUPPORTED_LANGUAGE)
        return speaking[0]
    voice = _named_voice(key, catalogue.voices, front.voice_aliases)
    if voice is None:
        known = ", ".join([*sorted(catalogue.voices), *sorted(front.voice_aliases)])
        raise InputError(f"voice_name: unknown voice {key[:64]!r}; known: {known}", code=UNKNOWN_VOICE)
    spec = catalogue.get(voice or None)
    if language is not None and language not in spec.languages:
        raise InputError(f"language_code: voice {spec.name!r} does not speak {language_code!r} (it speaks "
                         f"{', '.join(LANGUAGE_TAGS.get(lang, lang) for lang in spec.languages)})",
                         code=UNSUPPORTED_LANGUAGE)
    return spec.name


def _named_voice(key: str, voices: Mapping[str, Any], aliases: Mapping[str, str]) -> str | None:
    """A catalogue voice name for ``key`` ('' for an alias of the default voice), None when it names none."""
    for candidate in (key, key.lower()):
        if candidate in voices:
            return candidate
    lowered = {alias.lower(): target for alias, target in aliases.items()}
    if key.lower() in lowered:
        return lowered[key.lower()]
    prefix, _, own = key.partition(".")  # a listed Riva-style name of our own voice: English-US.joe
    language = {v.lower(): k for k, v in RIVA_PREFIXES.items()}.get(prefix.lower())
    if own in voices and language in getattr(voices[own], "languages", ()):
        return own
    return None


def read_dictionary(raw: str) -> dict[str, str] | None:
    """Riva's ``custom_dictionary`` (``"word  phonemes"`` entries, comma-separated; the Riva client joins a dict's
    items so) as a lexicon; what each entry says is checked by the text frontend (BAD_LEXICON)."""
    if not raw.strip():
        return None
    lexicon: dict[str, str] = {}
    for entry in raw.split(","):
        word, _, reading = entry.strip().partition("  ")
        if not reading.strip():
            word, _, reading = entry.strip().partition(" ")
        if not word.strip() or not reading.strip():
            raise InputError(f"custom_dictionary: entry {entry[:64]!r} is not 'word  phonemes'", code=BAD_LEXICON)
        lexicon[word.strip()] = reading.strip()
    return lexicon
