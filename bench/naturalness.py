"""``python -m bench.naturalness [VOICE...]``: each voice's naturalness (DNSMOS P.808 and P.835) on its held-out
sentences as this install serves it, one line a voice: the figures of the README's voice table and docs/VOICES.md.
The same figure a preparation records in a voice's verdicts (``pipeline/prepare/naturalness.py``)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence

from pipeline.prepare.naturalness import score_voice
from wire.settings import load_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = load_settings(env=dict(os.environ))
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
