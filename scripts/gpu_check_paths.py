"""The CUDA host paths on a generated graph of two float outputs of different shapes (as joe's): a stage's outputs
equal ``session.run``'s on each path, and stay as they were across its next call. The GPU check's ``paths`` section
on a device; tests/test_binding.py on CPU (the pinned copy through tests/device_standin.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def two_float_outputs(path: Path) -> Path:
    """x [B, 8, T] -> frames [B, T, 8] (tanh, transposed) and audio [B, 1, 4T] (a stride-4 ConvTranspose)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 1, 4)).astype(np.float32), "w")
    nodes = [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Transpose", ["t"], ["frames"], perm=[0, 2, 1]),
             helper.make_node("ConvTranspose", ["x", "w"], ["audio"], strides=[4])]
    x, frames, audio = (helper.make_tensor_value_info(n, TensorProto.FLOAT, d)
                        for n, d in (("x", ["B", 8, "T"]), ("frames", ["B", "T", 8]), ("audio", ["B", 1, "S"])))
    graph = helper.make_graph(nodes, "two", [x], [frames, audio], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def check_paths(path: Path, runtime: Any, *, pinned: bool) -> dict[str, float]:
    """The largest difference from ``session.run`` per path and output (``pinned``: the pinned copy too), and
    ``kept``: how far a first call's outputs moved across a second call. On CPU the stage's binding is set here."""
    from pipeline.voices.binding import StageBinding
    from pipeline.voices.runtime import SessionFactory, StageSession

    stage = StageSession(SessionFactory(runtime), path, voice="two", stage="check")
    stage.load()
    device = "cuda" if stage.host_pool else "cpu"
    if device == "cpu":
        stage._binding = StageBinding(stage.session, device="cpu", pinned=False)
    first, second = np.random.default_rng(1).standard_normal((2, 3, 8, 20)).astype(np.float32)
    want = stage.session.run(None, {"x": first})
    out: dict[str, float] = {}
    for name in ("pageable", "pinned") if pinned else ("pageable",):
        got = StageBinding(stage.session, device=device, pinned=name == "pinned").run({"x": first})
        for output, g, w in zip(("frames", "audio"), got, want):
            out[f"{name}_{output}"] = float(np.abs(g - w).max()) if g.shape == w.shape else float("inf")
    kept = stage.run(["frames", "audio"], {"x": first})
    copies = [k.copy() for k in kept]
    stage.run(["frames", "audio"], {"x": second})
    out["stage"] = max(float(np.abs(c - w).max()) for c, w in zip(copies, want))
    out["kept"] = max(float(np.abs(k - c).max()) for k, c in zip(kept, copies))
    return out


def paths_section(work: Path, runtime: Any) -> dict[str, Any]:
    """``check_paths`` on ``runtime.device``, the pinned copy where torch with CUDA is; ``ok``: all under 1e-5."""
    from pipeline.voices.gpu import cuda_pinning_available

    pinned = runtime.device == "cuda" and cuda_pinning_available()
    found = check_paths(two_float_outputs(work / "two.onnx"), runtime, pinned=pinned)
    return {**found, "ok": all(v <= 1e-5 for v in found.values())}
