"""Piper's acoustic noise from a seed (pipeline/voices/piper/noise.py): the same seed makes the same frames, so a redo
of a streamed segment makes its frames again instead of reading them back from Redis.

On a small graph made here: the lookup's shape, values and independence of batch-mates and padding. On joe as
prepared: the acoustic stage takes ``noise_offsets``, the same seed gives the same frames (alone and in a batch), another
seed or none gives other frames (the noise is still noise).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pipeline.errors import MODEL_CORRUPT, ModelError
from pipeline.voices.bank import VoiceBank
from pipeline.voices.base import SynthesisOptions
from pipeline.voices.piper.noise import CHANNEL_STRIDE, NOISE_OFFSETS, NOISE_TABLE, TABLE_SEED, seed_noise
from pipeline.voices.twostage import TwoStageVoice
from wire.settings import Settings

LONG = "The lighthouse keeper wrote a long letter to his sister every Sunday evening, and she answered it."
SHORT = "Yes, of course."


def _random_graph(path: Path, op: str = "RandomNormalLike") -> Path:
    """X [B, C, T] -> noise shaped like X, times 1."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node(op, ["x"], ["noise"], name="/r", dtype=TensorProto.FLOAT),
             helper.make_node("Identity", ["noise"], ["y"], name="/out")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "c", "t"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "c", "t"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    model.ir_version = 8
    if seed_noise(model) != 1:
        raise AssertionError("one random node was to be replaced")
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _run(path: Path, shape: tuple[int, int, int], offsets: list[int]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert NOISE_OFFSETS in {i.name for i in session.get_inputs()}
    (y,) = session.run(None, {"x": np.zeros(shape, np.float32), NOISE_OFFSETS: np.array(offsets, np.int64)})
    return np.asarray(y)


def test_the_lookup_gives_table_values_shaped_like_its_input(tmp_path: Path) -> None:
    y = _run(_random_graph(tmp_path / "g.onnx"), (2, 3, 5), [0, NOISE_TABLE - 2])
    table = np.random.default_rng(TABLE_SEED).standard_normal(NOISE_TABLE, dtype=np.float32)
    assert y.shape == (2, 3, 5)
    np.testing.assert_array_equal(y[0, 1], table[CHANNEL_STRIDE: CHANNEL_STRIDE + 5])
    np.testing.assert_array_equal(y[1, 0], table[[NOISE_TABLE - 2, NOISE_TABLE - 1, 0, 1, 2]])  # wraps round the table


def test_an_items_noise_depends_on_its_offset_alone(tmp_path: Path) -> None:
    path = _random_graph(tmp_path / "g.onnx")
    alone = _run(path, (1, 4, 7), [12345])
    batched = _run(path, (3, 4, 20), [999, 12345, 7])  # other batch-mates, longer padding
    np.testing.assert_array_equal(batched[1, :, :7], alone[0])
    assert not np.array_equal(batched[0, :, :7], alone[0])
    big = _run(path, (1, 192, 2000), [4242])[0]
    assert abs(float(big.mean())) < 0.01 and abs(float(big.std()) - 1.0) < 0.01  # standard normal
    positions = (4242 + np.arange(192)[:, None] * CHANNEL_STRIDE + np.arange(2000)[None, :]) % NOISE_TABLE
    table = np.random.default_rng(TABLE_SEED).standard_normal(NOISE_TABLE, dtype=np.float32)
    np.testing.assert_array_equal(big, table[positions])
    assert len(np.unique(positions)) == positions.size  # a segment's noise never takes a table position twice


def test_a_random_node_that_cannot_be_seeded_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as exc:
        _random_graph(tmp_path / "u.onnx", op="RandomUniformLike")
    assert exc.value.code == MODEL_CORRUPT


@pytest.fixture(scope="module")
def joe(base_settings: Settings) -> TwoStageVoice:
    runtime = dataclasses.replace(base_settings.runtime, device="cpu", intra_op_threads=1)
    voice = VoiceBank(base_settings.catalogue, runtime).get("joe")
    assert isinstance(voice, TwoStageVoice)
    return voice


def test_joe_as_prepared_takes_its_noise_from_offsets(joe: TwoStageVoice) -> None:
    assert NOISE_OFFSETS in joe.acoustic.session.input_names  # type: ignore[attr-defined]
    assert joe.replayable


def test_the_same_seed_makes_the_same_frames_alone_and_in_a_batch(joe: TwoStageVoice) -> None:
    opts = SynthesisOptions()  # noise on, as served
    ids, other = joe.phonemize(LONG, "en").ids, joe.phonemize(SHORT, "en").ids
    first = joe.acoustic_outputs([ids], opts, [2026])[0]
    again = joe.acoustic_outputs([ids], opts, [2026])[0]
    np.testing.assert_array_equal(first.frames, again.frames)
    np.testing.assert_array_equal(first.durations, again.durations)
    batched = joe.acoustic_outputs([other, ids], opts, [5, 2026])[1]
    np.testing.assert_array_equal(batched.durations, first.durations)
    assert float(np.max(np.abs(batched.frames - first.frames))) <= 1e-3


def test_another_seed_or_none_gives_other_noise(joe: TwoStageVoice) -> None:
    opts = SynthesisOptions()
    ids = joe.phonemize(LONG, "en").ids
    seeded = joe.acoustic_outputs([ids], opts, [2026])[0]
    other = joe.acoustic_outputs([ids], opts, [2027])[0]
    drawn = [joe.acoustic_outputs([ids], opts)[0] for _ in range(2)]
    for out in (other, *drawn):
        assert out.frames.shape != seeded.frames.shape or not np.array_equal(out.frames, seeded.frames)
    assert drawn[0].frames.shape != drawn[1].frames.shape or not np.array_equal(drawn[0].frames, drawn[1].frames)
    noiseless = [joe.acoustic_outputs([ids], SynthesisOptions.noiseless(), [s])[0].frames for s in (1, 2)]
    np.testing.assert_array_equal(*noiseless)  # the seed moves only the noise
