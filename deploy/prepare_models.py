"""Prepare every catalogue voice's model files at image build time, so a container starts serving fast.

Builds each concrete voice without creating an inference session: the Piper graph with its frame-length
output and the joined Kokoro model land in ``runtime.model_cache_dir``. No accelerator is needed.

    python deploy/prepare_models.py
"""

from __future__ import annotations

import logging
import os
import sys
import time


def main() -> int:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from pipeline.settings import load_settings
    from pipeline.voices.bank import VoiceBank

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    settings = load_settings(env=os.environ)
    bank = VoiceBank(settings.catalogue, settings.runtime)
    for name in bank.concrete_names():
        start = time.perf_counter()
        voice = bank.get(name, load=False)
        print(f"{name}: {getattr(voice, 'model', '?')} ready in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
