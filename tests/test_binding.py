"""Stage IO binding (pipeline/voices/binding.py) and precision variants (pipeline/prepare/precision.py) on CPU.

The binding code is the CUDA serving path; onnxruntime's CPU provider runs IO binding too, so the staging,
binding and copy-back logic is checked here against plain ``session.run`` on a small real graph.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.prepare.precision import to_dynamic_int8, to_fp16
from pipeline.voices.binding import StageBinding
from wire.settings import Settings


def conv_vocoder(path: Path) -> Path:
    """frames [B, 8, T] -> audio [B, 1, 4T]: a Conv1d then a stride-4 ConvTranspose (a vocoder's shape)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 8, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 1, 4)).astype(np.float32) * 0.1, "w2")
    nodes = [helper.make_node("Conv", ["frames", "w1"], ["h"], pads=[1, 1]),
             helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("ConvTranspose", ["t", "w2"], ["audio"], strides=[4]),
             helper.make_node("Shape", ["frames"], ["frames_shape"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("frames", TensorProto.FLOAT, ["B", 8, "T"])],
                              [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["B", 1, "S"]),
                               helper.make_tensor_value_info("frames_shape", TensorProto.INT64, [3])], [w1, w2])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return conv_vocoder(tmp_path / "voc.onnx")


@pytest.fixture
def device_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA copy-back's torch calls, on host memory (tests/device_standin.py)."""
    from tests.device_standin import standin_torch

    monkeypatch.setitem(sys.modules, "torch", standin_torch())


@pytest.mark.parametrize("pinned", [False, True], ids=["pageable", "pinned-copy"])
def test_binding_matches_session_run_and_reuses_its_pool(model: Path, pinned: bool, request: pytest.FixtureRequest) -> None:
    """Both ways an output reaches the host: numpy from the bound value (pageable) and the pinned pool's copy from
    the device pointer (``copy_``; on CPU through the stand-in torch): each output equals ``session.run``'s."""
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    if pinned:
        request.getfixturevalue("device_torch")
        bound = StageBinding(sess, device="cpu", pinned=True)
    else:
        bound = StageBinding(sess, device="cpu")
        assert bound.pinned is False  # no CUDA here: a plain numpy pool
    rng = np.random.default_rng(1)
    for t in (20, 20, 13, 20):  # the same shape again must not allocate again
        frames = rng.standard_normal((3, 8, t)).astype(np.float32)
        audio, shape = bound.run({"frames": frames})
        ref_audio, ref_shape = sess.run(None, {"frames": frames})
        np.testing.assert_array_equal(audio, ref_audio)
        np.testing.assert_array_equal(shape, ref_shape)
    assert bound.allocations == 3  # input, audio, shape: allocated once (13 fits in the 20-frame buffers)
    assert len(bound.shapes_seen) == 2
    only_audio = bound.run({"frames": frames}, outputs=["audio"])
    assert len(only_audio) == 1 and only_audio[0].shape == (3, 1, 80)


def test_fp16_variant_keeps_fp32_io_and_halves_the_weights(model: Path, tmp_path: Path) -> None:
    half = onnx.load(str(to_fp16(model, tmp_path / "voc.fp16.onnx")))
    assert half.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert half.graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert {i.data_type for i in half.graph.initializer} == {TensorProto.FLOAT16}
    assert not list(tmp_path.glob("*.tmp"))


def test_dynamic_int8_variant_runs_and_stays_close(model: Path, tmp_path: Path) -> None:
    q = to_dynamic_int8(model, tmp_path / "voc.int8.onnx")
    assert any(n.op_type == "ConvInteger" for n in onnx.load(str(q)).graph.node)
    frames = np.random.default_rng(2).standard_normal((1, 8, 30)).astype(np.float32)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(["audio"], {"frames": frames})[0]
    out = ort.InferenceSession(str(q), providers=["CPUExecutionProvider"]).run(["audio"], {"frames": frames})[0]
    assert out.shape == ref.shape and float(np.max(np.abs(out - ref))) < 0.1 * float(np.max(np.abs(ref)))


def test_variants_are_written_in_an_ir_version_older_runtimes_read(model: Path, tmp_path: Path) -> None:
    """onnx writes IR 14 by default; onnxruntime-gpu 1.31 reads up to 13. Opset 17 needs only IR 8."""
    for made in (to_fp16(model, tmp_path / "a.onnx"), to_dynamic_int8(model, tmp_path / "b.onnx")):
        assert onnx.load(str(made)).ir_version <= 10


def test_precision_is_chosen_per_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: INT8 (where the catalogue asks and the gate passes) on CPU; where sessions run on CUDA FP32, and FP16 for
    vocoders (INT8's integer ops have no CUDA kernels: measured 2-15x slower there; FP16 vocoders 1.2-1.3x faster);
    an explicit runtime.precision wins."""
    from pipeline.settings import RuntimeSettings, VoiceSpec
    from pipeline.voices.prepared import wanted_precision

    spec = VoiceSpec("v", "twostage", ("en",), precision="int8")
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert wanted_precision(spec, RuntimeSettings(device="cuda")) == "fp32"
    assert wanted_precision(spec, RuntimeSettings(device="auto"), "acoustic") == "fp32"
    assert wanted_precision(spec, RuntimeSettings(device="cuda"), "vocoder") == "fp16"  # served if its FP16 gate passed
    assert wanted_precision(spec, RuntimeSettings(device="cpu")) == "int8"
    assert wanted_precision(spec, RuntimeSettings(device="cuda", precision="int8")) == "int8"
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert wanted_precision(spec, RuntimeSettings(device="auto")) == "int8"


def test_two_float_outputs_and_outputs_kept_across_calls_on_every_host_path(tmp_path: Path, device_torch: None,
                                                                             base_settings: Settings) -> None:
    """A graph with two float outputs of different shapes (as joe's): through the pageable and the pinned copy each
    output equals ``session.run``'s, and a stage's outputs kept across its next call on the thread stay as they were
    (scripts/gpu_check_paths.py: the GPU check makes the same assertions on a device)."""
    from scripts.gpu_check_paths import check_paths, two_float_outputs

    runtime = dataclasses.replace(base_settings.runtime, device="cpu", intra_op_threads=1)
    found = check_paths(two_float_outputs(tmp_path / "two.onnx"), runtime, pinned=True)
    assert found == {"pageable_frames": 0.0, "pageable_audio": 0.0, "pinned_frames": 0.0, "pinned_audio": 0.0,
                     "stage": 0.0, "kept": 0.0}
