"""A tiny two-stage voice built with ``onnx.helper`` (a few KB, no downloads), for engine tests.

* Acoustic graph: ``input`` int64 [B, N] and ``input_lengths`` int64 [B] -> ``frames`` float32 [B, C, T]
  (channels first, as Piper's), ``frame_lengths`` int64 [B] and ``durations`` int64 [B, N]. Each id
  lasts ``id % 3 + 1`` frames (0 past an item's length); frame ``t`` of an item is the embedding of the
  id whose span holds ``t`` (a hard alignment path times an embedding table, as VITS expands its prior).
  Padded rows and frames are exactly zero, so an item's frames do not depend on its batch.
* Vocoder graph: ``frames`` float32 [B, T, C] (time first) -> ``audio`` float32 [B, 1, T * HOP]: a
  bias-free stack (Conv k5, tanh, dilated Conv k5 d2, tanh, ConvTranspose stride HOP, tanh, Conv k9) whose
  receptive field is 6 frames each side (plus 4 samples): vocoding a window with ``CONTEXT`` frames of
  context each side reproduces the same samples as vocoding the whole item. The voice is built with
  ``tail_frames = CONTEXT`` (see ``OnnxVocoder``), so batch = solo holds exactly.

Run as a script to write both files into a folder: ``python tests/generate_tiny_voice.py OUT_DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

CHANNELS = 8
HIDDEN = 8
UPSAMPLED = 4
HOP = 64
CONTEXT = 7  # frames each side: 2 + 4 from the frame-rate convs, 1 more covers the sample-rate conv
VOCAB = 40
SAMPLE_RATE = HOP * 100
ACOUSTIC_FILE = "tiny-acoustic.onnx"
VOCODER_FILE = "tiny-vocoder.onnx"


def _const(name: str, value: np.ndarray):  # type: ignore[no-untyped-def]
    from onnx import numpy_helper

    return numpy_helper.from_array(np.asarray(value), name)


def acoustic_model():  # type: ignore[no-untyped-def]
    from onnx import TensorProto, helper

    rng = np.random.default_rng(11)
    h = helper.make_node
    nodes = [
        h("Shape", ["input"], ["ids_shape"]),
        h("Gather", ["ids_shape", "one"], ["n_ids"], axis=0),
        h("Range", ["zero", "n_ids", "one"], ["positions"]),  # [N]
        h("Unsqueeze", ["positions", "ax0"], ["positions_row"]),  # [1, N]
        h("Unsqueeze", ["input_lengths", "ax1"], ["lengths_col"]),  # [B, 1]
        h("Less", ["positions_row", "lengths_col"], ["valid"]),  # [B, N]
        h("Cast", ["valid"], ["valid_i"], to=TensorProto.INT64),
        h("Mod", ["input", "three"], ["id_mod"]),
        h("Add", ["id_mod", "one"], ["raw_durations"]),
        h("Mul", ["raw_durations", "valid_i"], ["durations"]),  # [B, N]
        h("ReduceSum", ["durations", "ax1"], ["frame_lengths"], keepdims=0),  # [B]
        h("CumSum", ["durations", "one"], ["ends"]),
        h("Sub", ["ends", "durations"], ["starts"]),
        h("ReduceMax", ["frame_lengths"], ["n_frames"], keepdims=0),
        h("Range", ["zero", "n_frames", "one"], ["times"]),  # [T]
        h("Unsqueeze", ["times", "ax_t"], ["times_col"]),  # [1, T, 1]
        h("Unsqueeze", ["starts", "ax1"], ["starts_3"]),  # [B, 1, N]
        h("Unsqueeze", ["ends", "ax1"], ["ends_3"]),
        h("GreaterOrEqual", ["times_col", "starts_3"], ["after_start"]),
        h("Less", ["times_col", "ends_3"], ["before_end"]),
        h("And", ["after_start", "before_end"], ["in_span"]),  # [B, T, N]
        h("Cast", ["in_span"], ["path"], to=TensorProto.FLOAT),
        h("Gather", ["embedding", "input"], ["embedded"], axis=0),  # [B, N, C]
        h("MatMul", ["path", "embedded"], ["frames_ntc"]),  # [B, T, C]
        h("Transpose", ["frames_ntc"], ["frames"], perm=[0, 2, 1]),  # [B, C, T]
    ]
    inits = [
        _const("zero", np.array(0, np.int64)),
        _const("one", np.array(1, np.int64)),
        _const("three", np.array(3, np.int64)),
        _const("ax0", np.array([0], np.int64)),
        _const("ax1", np.array([1], np.int64)),
        _const("ax_t", np.array([0, 2], np.int64)),
        _const("embedding", (0.5 * rng.standard_normal((VOCAB, CHANNELS))).astype(np.float32)),
    ]
    graph = helper.make_graph(
        nodes, "tiny_acoustic",
        [helper.make_tensor_value_info("input", TensorProto.INT64, ["batch", "phonemes"]),
         helper.make_tensor_value_info("input_lengths", TensorProto.INT64, ["batch"])],
        [helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["batch", CHANNELS, "frames"]),
         helper.make_tensor_value_info("frame_lengths", TensorProto.INT64, ["batch"]),
         helper.make_tensor_value_info("durations", TensorProto.INT64, ["batch", "phonemes"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def vocoder_model():  # type: ignore[no-untyped-def]
    from onnx import TensorProto, helper

    rng = np.random.default_rng(12)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    h = helper.make_node
    nodes = [
        h("Transpose", ["frames"], ["x0"], perm=[0, 2, 1]),  # [B, C, T]
        h("Conv", ["x0", "w1"], ["c1"], kernel_shape=[5], pads=[2, 2]),
        h("Tanh", ["c1"], ["a1"]),
        h("Conv", ["a1", "w2"], ["c2"], kernel_shape=[5], pads=[4, 4], dilations=[2]),
        h("Tanh", ["c2"], ["a2"]),
        h("ConvTranspose", ["a2", "w3"], ["up"], kernel_shape=[HOP], strides=[HOP]),  # [B, U, T * HOP]
        h("Tanh", ["up"], ["a3"]),
        h("Conv", ["a3", "w4"], ["audio"], kernel_shape=[9], pads=[4, 4]),  # [B, 1, T * HOP]
    ]
    inits = [
        _const("w1", weight(HIDDEN, CHANNELS, 5)),
        _const("w2", weight(HIDDEN, HIDDEN, 5)),
        _const("w3", weight(HIDDEN, UPSAMPLED, HOP)),
        _const("w4", weight(1, UPSAMPLED, 9)),
    ]
    graph = helper.make_graph(
        nodes, "tiny_vocoder",
        [helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["batch", "frames", CHANNELS])],
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", 1, "samples"])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def write_tiny_voice(folder: Path) -> tuple[Path, Path]:
    """Write (and check) both graphs into ``folder``; return their paths."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / ACOUSTIC_FILE, folder / VOCODER_FILE
    for model, path in zip((acoustic_model(), vocoder_model()), paths):
        onnx.checker.check_model(model, full_check=True)
        onnx.save(model, str(path))
    return paths


class TinyPhonemizer:
    """Letters -> ids 1..26 (spaces 27): enough text handling for engine tests."""

    languages = ("en",)

    def phonemize(self, text: str, lang: str):  # type: ignore[no-untyped-def]
        from pipeline.errors import NOTHING_TO_SPEAK, UNSUPPORTED_LANGUAGE, InputError
        from pipeline.voices.base import Phonemized

        if lang not in self.languages:
            raise InputError(f"tiny voice does not speak {lang!r}", code=UNSUPPORTED_LANGUAGE)
        letters = [c for c in text.lower() if c.isascii() and (c.isalpha() or c == " ")]
        ids = tuple(27 if c == " " else ord(c) - ord("a") + 1 for c in letters)
        if not any(c.isalpha() for c in letters):
            raise InputError(f"nothing to speak in {text!r}", code=NOTHING_TO_SPEAK)
        return Phonemized(ids=ids, phonemes="".join(letters))


def build_tiny(spec, factory):  # type: ignore[no-untyped-def]
    """A ``STAGE_BUILDERS`` target: the tiny voice from a catalogue entry (``acoustic``/``vocoder`` paths)."""
    from pipeline.voices.runtime import StageSession, resolve_resource
    from pipeline.voices.twostage import AcousticGraph, OnnxAcoustic, OnnxVocoder, TwoStageVoice

    def stage(ref: str, name: str) -> StageSession:
        return StageSession(factory, resolve_resource(ref), voice=spec.name, stage=name)

    sessions = {"acoustic": stage(spec.acoustic, "acoustic"), "vocoder": stage(spec.vocoder, "vocoder")}
    graph = AcousticGraph(ids="input", lengths="input_lengths", frames="frames", frame_lengths="frame_lengths",
                          durations="durations", layout="channels_first")
    acoustic = OnnxAcoustic(sessions["acoustic"], graph, channels=CHANNELS, max_batch=spec.max_batch)
    vocoder = OnnxVocoder(sessions["vocoder"], frames_input="frames", audio_output="audio", hop=HOP, context=CONTEXT,
                          max_batch=spec.max_batch, layout="time_first", tail_frames=CONTEXT)
    return TwoStageVoice(name=spec.name, languages=spec.languages, sample_rate=SAMPLE_RATE, phonemizer=TinyPhonemizer(),
                         acoustic=acoustic, vocoder=vocoder, max_batch=spec.max_batch, sessions=sessions)


if __name__ == "__main__":
    for written in write_tiny_voice(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(written, written.stat().st_size, "bytes")
