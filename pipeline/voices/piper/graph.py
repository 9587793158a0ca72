"""The Piper VITS graph: its tensor names, and its preparation for exact batched inference.

A padded batch makes the decoder produce ``max(frames) * hop`` samples for every item, and the tail of
a shorter item holds noise, not silence. The model itself knows each item's true frame count: the
``Cast(Clip(ReduceSum(Ceil(durations))))`` that feeds the attention mask. We expose that tensor as an
extra output, ``frame_lengths``, so each item is cut at ``frames * hop`` samples: the same length it
gets alone, never guessed from silence (``run_whole``). The prepared copy is written once to the model cache.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import MODEL_CORRUPT, ModelError
from pipeline.voices.runtime import sha256_file

log = logging.getLogger(__name__)

PIPER_INPUTS = ("input", "input_lengths", "scales")  # phoneme ids [B, N] (pad 0), their lengths [B], the scales [3]
AUDIO = "output"  # [B, 1, T * hop]
FRAME_LENGTHS = "frame_lengths"  # [B]: exposed by ``prepare_piper_graph``
# Node-name prefixes kept in FP32 when the graph is quantized (measured on joe: docs/lab/voices-and-quality.md):
# - /dec/: the HiFi-GAN decoder is the sensitive part: quantized, it gave 9.9 dB (static) and 5.7 dB
#   (dynamic) log-mel L1 against FP32, and static QDQ in it broke batch = solo (differences up to 0.013).
# - /enc_p/ and /dp/: the text encoder and the duration predictor decide each phoneme's frame count
#   (ceil of exp(logw)), so any change there moves frame boundaries: with only /dec/ excluded, 11 of 12
#   items came out a different length from FP32; the quality gate allows none.
# What remains quantized is the flow (40 Conv) and the two MatMuls that expand the prior over frames.
INT8_EXCLUDE: tuple[str, ...] = ("/enc_p/", "/dp/", "/dec/")


@dataclass(frozen=True)
class PreparedGraph:
    path: Path
    hop: int
    source_sha256: str


def find_frame_chain(graph) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """The frame-length tensor (``Cast(Clip(ReduceSum(Ceil(w))))``) and the ``Ceil`` output it sums:
    each phoneme's frame count."""
    producer = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        if node.op_type != "Cast":
            continue
        chain = []
        cur = node
        for _ in range(3):
            cur = producer.get(cur.input[0]) if cur.input else None
            if cur is None:
                break
            chain.append(cur)
        if [n.op_type for n in chain] == ["Clip", "ReduceSum", "Ceil"]:
            return str(node.output[0]), str(chain[-1].output[0])
    raise ModelError("not a Piper VITS graph: no frame-length tensor (Ceil -> ReduceSum -> Clip -> Cast)", code=MODEL_CORRUPT)


def _hop_length(graph) -> int:  # type: ignore[no-untyped-def]
    import onnx

    hop = 1
    for node in graph.node:
        if node.op_type == "ConvTranspose":
            for attr in node.attribute:
                if attr.name == "strides":
                    hop *= int(onnx.helper.get_attribute_value(attr)[0])
    if hop <= 1:
        raise ModelError("not a Piper VITS graph: no upsampling decoder found", code=MODEL_CORRUPT)
    return hop


def prepare_piper_graph(source: Path, cache_dir: Path) -> PreparedGraph:
    """Return the cached graph with ``frame_lengths`` exposed, building it on first use."""
    digest = sha256_file(source)
    out = cache_dir / "models" / f"{digest[:16]}-{source.stem}.lengths.onnx"
    meta = out.with_suffix(".json")
    if out.is_file() and meta.is_file():
        info = json.loads(meta.read_text())
        return PreparedGraph(path=out, hop=int(info["hop"]), source_sha256=digest)
    import onnx

    start = time.perf_counter()
    try:
        model = onnx.load(str(source))
    except Exception as exc:
        raise ModelError(f"cannot read ONNX file {source.name}: {exc}", code=MODEL_CORRUPT) from exc
    name, _ = find_frame_chain(model.graph)
    hop = _hop_length(model.graph)
    if FRAME_LENGTHS not in {o.name for o in model.graph.output}:
        model.graph.node.append(onnx.helper.make_node("Identity", [name], [FRAME_LENGTHS], name="ttsfarm_frame_lengths"))
        model.graph.output.append(onnx.helper.make_tensor_value_info(FRAME_LENGTHS, onnx.TensorProto.INT64, ["batch"]))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{time.monotonic_ns()}")
    onnx.save(model, str(tmp))
    tmp.replace(out)
    meta.write_text(json.dumps({"hop": hop, "source": str(source), "source_sha256": digest, "frames_tensor": name}))
    log.info("prepared %s (hop %d) in %.1f s", out.name, hop, time.perf_counter() - start)
    return PreparedGraph(path=out, hop=hop, source_sha256=digest)


def int8_paths(prepared: Path) -> tuple[Path, Path]:
    """Where ``ttsfarm quantize`` writes the INT8 model of a prepared graph, and its quality report."""
    base = prepared.with_name(prepared.name.replace(".lengths.onnx", ".int8.onnx"))
    return base, base.with_suffix(".json")


def run_whole(session: Any, feeds: Mapping[str, np.ndarray], hop: int) -> list[np.ndarray]:
    """The prepared whole graph on one padded batch: each item's audio cut at its own frame count."""
    audio, frames = session.run([AUDIO, FRAME_LENGTHS], dict(feeds))
    audio = np.asarray(audio).reshape(len(frames), -1)
    return [np.ascontiguousarray(audio[row, : int(n) * hop], dtype=np.float32) for row, n in enumerate(frames)]
