"""Whether a redo needs the first attempt's acoustic frames: joe's acoustic pass on one sentence,
run twice alone and once in a batch of three, with the default synthesis options and noiseless, compared frame for
frame; and what the frames weigh against the PCM16 they make.

    python scripts/bench_redo_frames.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.voices.bank import VoiceBank  # noqa: E402
from pipeline.voices.base import SynthesisOptions  # noqa: E402
from wire.settings import load_settings  # noqa: E402

SENTENCE = "The farm reads this sentence again after a worker died."
OTHERS = ("A shorter one.", "And a third sentence, of another length entirely.")


def main() -> None:
    settings = load_settings()
    voice = VoiceBank(settings.catalogue, settings.runtime).get("joe")
    ids = voice.phonemize(SENTENCE, "en").ids
    others = [voice.phonemize(t, "en").ids for t in OTHERS]
    for name, opts in (("defaults", SynthesisOptions()), ("noiseless", SynthesisOptions(noise_scale=0.0, noise_w=0.0))):
        first, again = (voice.acoustic_outputs([ids], opts)[0].frames for _ in range(2))
        batched = voice.acoustic_outputs([ids, *others], opts)[0].frames
        weight = first.nbytes / (first.shape[0] * voice.hop * 2)
        print(f"{name}: frames {first.shape[0]} / {again.shape[0]} / {batched.shape[0]} (alone, alone again, in a batch of 3); "
              f"alone twice identical: {first.shape == again.shape and bool(np.array_equal(first, again))}; "
              f"alone vs batch identical: {first.shape == batched.shape and bool(np.array_equal(first, batched))}; "
              f"frames weigh {weight:.2f} x the PCM16 they make")


if __name__ == "__main__":
    main()
