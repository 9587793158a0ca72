"""``python -m bench.naturalness [VOICE...]``: each voice's naturalness (DNSMOS P.808 and P.835) on its held-out
sentences as this install serves it, one line a voice: the figures of the README's voice table and docs/VOICES.md.
The same measure a preparation records in a voice's verdicts (``pipeline/prepare/naturalness.py``; a preparation
runs it with one intra-op thread on the audio its listening gate hears)."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from typing import Any

from pipeline.prepare.listening import heldout_sentences
from pipeline.prepare.naturalness import naturalness
from pipeline.settings import PipelineSettings
from pipeline.synth import Synthesizer
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.runtime import SessionFactory
from wire.settings import settings_from_environment


def score_voice(settings: PipelineSettings, name: str) -> dict[str, Any]:
    """``name``'s naturalness figure on its held-out sentences, as this install serves it (``ttsfarm say``'s path)."""
    spec = settings.catalogue.get(name)
    synth = Synthesizer(settings)
    clips = []
    for text in heldout_sentences(spec.languages[0]):
        out = synth.synthesize(text, name, SynthesisOptions())
        clips.append((out.audio, out.sample_rate))
    return naturalness(clips, settings.quality_gate.min_p808_mos, SessionFactory(settings.runtime))


def main(argv: Sequence[str] | None = None) -> int:
    settings = settings_from_environment()
    names = list(sys.argv[1:] if argv is None else argv) or [n for n, s in settings.catalogue.voices.items() if s.engine != "blend"]
    for name in names:
        start = time.perf_counter()
        figure = score_voice(settings, name)
        p835 = figure["p835"]
        print(f"{name}: P.808 {figure['value']:.2f} (floor {figure['floor']:.2f}, {'passed' if figure['passed'] else 'FAILED'}), "
              f"P.835 sig {p835['sig']:.2f} bak {p835['bak']:.2f} ovrl {p835['ovrl']:.2f}, {figure['clips']} sentences, "
              f"{time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
