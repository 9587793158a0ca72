"""Mandarin round trips in tests, scored on syllables: whisper base sometimes writes a sentence in traditional
characters (天氣 for 天气) or picks a homophone (它 for 他); comparing the toneless pinyin of what was said
and what was heard counts only what the voice got wrong."""

from __future__ import annotations

from pipeline.intelligibility import edit_distance


def syllables(text: str) -> list[str]:
    from pypinyin import lazy_pinyin

    return [s for s, c in zip(lazy_pinyin(list(text)), text) if "\u4e00" <= c <= "\u9fff"]


def syllable_error_rate(refs: list[str], hyps: list[str]) -> float:
    errors = sum(edit_distance(syllables(r), syllables(h)) for r, h in zip(refs, hyps))
    return errors / max(1, sum(len(syllables(r)) for r in refs))
