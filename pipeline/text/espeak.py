"""espeak-ng phonemes as Piper's voices were trained on them, without the bridge's leak.

piper-tts 1.8 reads espeak-ng through its C extension ``piper.espeakbridge``; its ``get_phonemes`` appends each
clause's ``(phonemes, terminator, end_of_sentence)`` tuple to the returned list without giving up its own
reference, so every clause a worker ever phonemized stays in memory (a few hundred bytes each: docs/lab/memory.md).
``EspeakClauses`` calls the same exported C function, ``espeak_TextToPhonemesWithTerminator``,
in the same library (``ctypes`` opens the loaded ``espeakbridge`` module again, so it shares espeak-ng's one
process-global state: the data directory and the voice the bridge set), and builds Python strings only for what it
returns. ``phonemize`` is ``piper.phonemize_espeak.EspeakPhonemizer.phonemize`` on top of it: the same clauses,
terminators, language-switch flags removed, NFD decomposition and vowel clusters (tests/test_espeak_clauses.py
compares the two on the same texts).

espeak-ng is one process-global C library: callers hold one lock around ``set_voice`` and ``phonemize`` together.
"""

from __future__ import annotations

import ctypes
import re
import unicodedata
from collections.abc import Iterator

# espeak-ng's clause flags (speak_lib.h / translate.h), as the bridge decodes them.
_INTONATION_FULL_STOP = 0x00000000
_INTONATION_COMMA = 0x00001000
_INTONATION_QUESTION = 0x00002000
_INTONATION_EXCLAMATION = 0x00003000
_TYPE_CLAUSE = 0x00040000
_TYPE_SENTENCE = 0x00080000
_TERMINATORS = {
    40 | _INTONATION_FULL_STOP | _TYPE_SENTENCE: ".",
    40 | _INTONATION_QUESTION | _TYPE_SENTENCE: "?",
    45 | _INTONATION_EXCLAMATION | _TYPE_SENTENCE: "!",
    20 | _INTONATION_COMMA | _TYPE_CLAUSE: ",",
    30 | _INTONATION_FULL_STOP | _TYPE_CLAUSE: ":",
    30 | _INTONATION_COMMA | _TYPE_CLAUSE: ";",
}
_CHARS_AUTO = 0
_PHONEMES_IPA = 0x02
_LANG_FLAG_RE = re.compile(r"\([^)]+\)")  # "(fr)" ... "(en)" around words espeak reads in another language


class _Voice(ctypes.Structure):
    """espeak-ng's ``espeak_VOICE`` (speak_lib.h), as ``espeak_GetCurrentVoice`` returns it."""

    _fields_ = [("name", ctypes.c_char_p), ("languages", ctypes.c_char_p), ("identifier", ctypes.c_char_p),
                ("gender", ctypes.c_ubyte), ("age", ctypes.c_ubyte), ("variant", ctypes.c_ubyte), ("xx1", ctypes.c_ubyte),
                ("score", ctypes.c_int), ("spare", ctypes.c_void_p)]


class EspeakClauses:
    """espeak-ng's clauses of a text, read through the bridge's own copy of the library."""

    def __init__(self, data_dir: str | None = None) -> None:
        from piper import espeakbridge
        from piper.phonemize_espeak import ESPEAK_DATA_DIR

        espeakbridge.initialize(str(data_dir or ESPEAK_DATA_DIR))
        self._bridge = espeakbridge
        lib = ctypes.CDLL(espeakbridge.__file__)
        fn = lib.espeak_TextToPhonemesWithTerminator
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
        fn.restype = ctypes.c_char_p
        self._to_phonemes = fn
        current = lib.espeak_GetCurrentVoice
        current.restype = ctypes.POINTER(_Voice)
        self._current = current
        # the voice this set last, and espeak-ng's identifier for it: setting it again costs as much as phonemizing a
        # short sentence; another user of the library (piper-tts's own phonemizer) may have set another meanwhile
        self._voice: tuple[str, bytes | None] | None = None

    def set_voice(self, voice: str) -> None:
        """espeak-ng's voice by name (``RuntimeError`` "Failed to set voice: ..." for an unknown one); the voice set
        last is not set again."""
        if self._voice is not None and self._voice == (voice, self._identifier()):
            return
        self._voice = None  # unknown until the bridge took it
        self._bridge.set_voice(voice)
        self._voice = (voice, self._identifier())

    def _identifier(self) -> bytes | None:
        now = self._current()
        return now.contents.identifier if now else None

    def clauses(self, text: str) -> Iterator[tuple[str, str, bool]]:
        """``(phonemes, terminator, end_of_sentence)`` per clause, as ``espeakbridge.get_phonemes`` gives them."""
        if "\0" in text:
            raise ValueError("embedded null character")  # as the bridge's argument parsing says it
        buf = ctypes.create_string_buffer(text.encode("utf-8"))
        pos = ctypes.c_void_p(ctypes.addressof(buf))
        terminator = ctypes.c_int(0)
        while pos.value is not None:  # espeak-ng sets it to NULL after the last clause
            raw = self._to_phonemes(ctypes.byref(pos), _CHARS_AUTO, _PHONEMES_IPA, ctypes.byref(terminator))
            flags = terminator.value & 0x000FFFFF
            yield (raw or b"").decode("utf-8"), _TERMINATORS.get(flags, ""), flags & _TYPE_SENTENCE == _TYPE_SENTENCE

    def phonemize(self, text: str, vowel_clusters: set[tuple[str, ...]] | None = None) -> list[list[str]]:
        """Phonemes grouped by sentence, exactly as ``EspeakPhonemizer.phonemize`` groups them."""
        from piper.phonemize_espeak import _merge_known_vowel_clusters

        sentences: list[list[str]] = []
        current: list[str] = []
        for phonemes, terminator, end_of_sentence in self.clauses(text):
            phonemes = _LANG_FLAG_RE.sub("", phonemes) + terminator
            if terminator in (",", ":", ";"):
                phonemes += " "
            current.extend(unicodedata.normalize("NFD", phonemes))
            if end_of_sentence:
                sentences.append(_merge_known_vowel_clusters(current, vowel_clusters) if vowel_clusters else current)
                current = []
        if current:
            sentences.append(_merge_known_vowel_clusters(current, vowel_clusters) if vowel_clusters else current)
        return sentences
