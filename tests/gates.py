"""For tests of the quality gates: a damaged model (perturbed weights), and the figures a verdict shows that its
own run did not measure."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

FIGURE = re.compile(r"(\d+(?:\.\d+)?)\s*(%|dB|ms)")


def damage(path: Path, *, scale: float, seed: int = 0) -> Path:
    """Perturb every floating-point weight tensor of the ONNX model at ``path`` in place: each gets Gaussian noise of
    ``scale`` times its own standard deviation (a model broken the way a bad conversion or quantization breaks one)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    changed = 0
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if w.dtype.kind != "f" or w.ndim < 2 or w.size < 16:
            continue
        noisy = w.astype(np.float64) + scale * float(np.std(w)) * rng.standard_normal(w.shape)
        init.CopyFrom(numpy_helper.from_array(noisy.astype(w.dtype), init.name))
        changed += 1
    assert changed, f"no floating-point weights to perturb in {path}"
    onnx.save(model, str(path))
    return path


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield float(value)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _numbers(v)


def unmeasured_figures(verdict: dict[str, Any]) -> list[str]:
    """The figures (``N %``, ``N dB``, ``N ms``) in a verdict's reason that match no number recorded in the verdict
    itself (its measures, recognizer, spectral figures, ceilings), at the precision the reason shows them."""
    recorded = list(_numbers({k: v for k, v in verdict.items() if k != "reason"}))
    out = []
    for m in FIGURE.finditer(str(verdict.get("reason", ""))):
        text, unit = m.group(1), m.group(2)
        decimals = len(text.split(".")[1]) if "." in text else 0
        scales = (100.0, 1.0) if unit == "%" else (1.0,)
        if not any(abs(round(x * s, decimals) - float(text)) < 1e-9 for x in recorded for s in scales):
            out.append(m.group(0))
    return out
