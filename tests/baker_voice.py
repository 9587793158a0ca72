"""The prepared native Mandarin voice for tests: `ttsfarm voices prepare baker` (setup.sh runs it; here it is
a no-op then). Only when the throwaway converter venv cannot be built (no package index reachable) do the
tests that need the real models skip, saying so; any other failure fails them."""

from __future__ import annotations

import pytest

from pipeline.errors import MODEL_PREPARE_FAILED, ModelError
from pipeline.prepare.registry import prepare_voice
from pipeline.voices.prepared import PrepareResult
from wire.settings import Settings


def prepared_baker(settings: Settings) -> PrepareResult:
    try:
        return prepare_voice(settings.catalogue.get("baker"), settings)
    except ModelError as exc:
        if exc.code == MODEL_PREPARE_FAILED and "converter" in exc.message:
            pytest.skip(f"baker cannot be converted here (no converter environment): {exc.message}")
        raise
