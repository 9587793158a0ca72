"""The CUDA IO-binding path of the Piper voice, tested where it can be without a GPU.

onnxruntime supports IO binding on its CPU execution provider too, so the very code that runs on CUDA
(staging pool, rounded shapes, bound outputs, copy back to host) runs here against the real joe voice. The
pinned pool's device-to-host copy (torch reading the output's pointer, ``copy_``) runs here through a stand-in
for those torch calls on host memory (tests/device_standin.py); on a device, scripts/gpu_check.sh compares the
farm's audio with in-process synthesis before it reports farm figures (docs/GPU.md).
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from pipeline.voices.base import SynthesisOptions
from pipeline.voices.gpu import HostBufferPool, ShapePolicy, wants_io_binding
from pipeline.voices.piper.iobinding import IoBindingRunner
from pipeline.voices.runtime import SessionFactory
from wire.settings import Settings

TEXTS = [
    "Good morning.",
    "The meeting starts in five minutes.",
    "Please turn left at the next corner, then walk straight on to the river.",
]


@pytest.fixture(scope="module")
def voice(base_settings: Settings):  # type: ignore[no-untyped-def]
    from pipeline.voices.piper.voice import PiperVoice

    runtime = dataclasses.replace(base_settings.runtime, device="cpu", intra_op_threads=2)
    v = PiperVoice(base_settings.catalogue.get("joe"), SessionFactory(runtime), precision="fp32")
    v.load()
    assert v._runner is None  # on CPU the voice keeps its plain session.run
    return v


@pytest.fixture(scope="module")
def ids(voice):  # type: ignore[no-untyped-def]
    return [voice.phonemize(t, "en").ids for t in TEXTS]


def test_shape_rounding() -> None:
    p = ShapePolicy(width_multiple=32, batch_sizes=(1, 2, 4, 8))
    assert [p.width(n) for n in (1, 31, 32, 33, 64, 65)] == [32, 32, 32, 64, 64, 96]
    assert [p.batch(n) for n in (1, 2, 3, 4, 5, 8, 9, 17)] == [1, 2, 4, 4, 8, 8, 16, 24]
    assert ShapePolicy(width_multiple=64).width(65) == 128


def test_shape_policy_from_settings(base_settings: Settings) -> None:
    runtime = dataclasses.replace(base_settings.runtime, cuda_width_multiple=64, cuda_batch_sizes=(8.0, 1.0, 2.0))
    p = ShapePolicy.from_settings(runtime)
    assert p.width_multiple == 64 and p.batch_sizes == (1, 2, 8)
    assert p.batch(3) == 8


def test_pool_reuses_buffers_and_grows_only_when_needed() -> None:
    pool = HostBufferPool()
    a = pool.get("input", (4, 64), np.int64)
    cap = pool.capacity("input")
    assert pool.allocations == 1 and cap >= 4 * 64 * 8
    b = pool.get("input", (2, 32), np.int64)  # smaller: same memory, no allocation
    c = pool.get("input", (4, 64), np.int64)  # same again
    assert pool.allocations == 1 and pool.capacity("input") == cap
    assert np.shares_memory(a, b) and np.shares_memory(a, c)
    assert b.shape == (2, 32) and b.dtype == np.int64
    pool.get("input", (8, 256), np.int64)  # larger: grows once
    assert pool.allocations == 2 and pool.capacity("input") >= 8 * 256 * 8
    pool.get("input", (8, 200), np.int64)
    pool.get("scales", (3,), np.float32)  # another name has its own buffer
    assert pool.allocations == 3


def test_runner_pool_is_reused_across_batches(voice, ids) -> None:  # type: ignore[no-untyped-def]
    runner = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy(32, (1, 2, 4, 8)))
    opts = SynthesisOptions.noiseless()
    runner.synthesize(ids, voice.scales(opts), voice.hop)  # the largest batch first
    pool = runner.pool
    first = pool.allocations
    for batch in ([ids[0]], ids[:2], ids, [ids[1], ids[0]]):
        runner.synthesize(batch, voice.scales(opts), voice.hop)
    assert pool.allocations == first  # no allocation per batch once the buffers are big enough
    assert {rows for rows, _ in runner.shapes_seen} <= {1, 2, 4}
    assert all(width % 32 == 0 for _, width in runner.shapes_seen)


def test_io_binding_on_cpu_gives_the_plain_paths_audio(voice, ids) -> None:  # type: ignore[no-untyped-def]
    opts = SynthesisOptions.noiseless()
    plain = voice.synthesize_batch(ids, opts)
    # the same padded shape: the same computation, so the same samples
    exact = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy(1, (len(ids),)))
    for a, b in zip(exact.synthesize(ids, voice.scales(opts), voice.hop), plain):
        assert len(a) == len(b)
        assert float(np.abs(a - b).max()) == 0.0
    # rounded shapes (3 items -> 4 rows, width -> multiple of 32): within 1e-4 of the plain path
    rounded = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy(32, (1, 2, 4, 8)))
    out = rounded.synthesize(ids, voice.scales(opts), voice.hop)
    assert rounded.shapes_seen == {(4, rounded.policy.width(max(len(i) for i in ids)))}
    for a, b in zip(out, plain):
        assert len(a) == len(b)
        assert float(np.abs(a - b).max()) <= 1e-4


def test_the_pinned_copy_gives_the_plain_paths_audio(voice, ids, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The device-to-host copy of a pinned pool (torch reading the output's pointer, ``copy_`` into the pinned buffer),
    driven on CPU through tests/device_standin.py: the same samples as the plain path, batch after batch."""
    from tests.device_standin import standin_torch

    monkeypatch.setitem(sys.modules, "torch", standin_torch())
    opts = SynthesisOptions.noiseless()
    plain = voice.synthesize_batch(ids, opts)
    runner = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy(1, (1, len(ids))), pinned=True)
    for batch, want in ((ids, plain), ([ids[0]], voice.synthesize_batch([ids[0]], opts)), (ids, plain)):
        got = runner.synthesize(batch, voice.scales(opts), voice.hop)
        assert [len(a) for a in got] == [len(b) for b in want]
        assert all(float(np.abs(a - b).max()) == 0.0 for a, b in zip(got, want))
    assert runner.pool.pinned


def test_returned_audio_survives_the_next_batch(voice, ids) -> None:  # type: ignore[no-untyped-def]
    runner = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy(32, (1, 2, 4)))
    opts = SynthesisOptions.noiseless()
    first = runner.synthesize([ids[2]], voice.scales(opts), voice.hop)[0]
    kept = first.copy()
    runner.synthesize([ids[0]], voice.scales(opts), voice.hop)  # reuses the staging buffers
    assert np.array_equal(first, kept)  # what synthesize returned is not a view of them


def test_voice_uses_the_runner_when_it_has_one(voice, ids) -> None:  # type: ignore[no-untyped-def]
    opts = SynthesisOptions.noiseless()
    plain = voice.synthesize_batch(ids, opts)
    voice._runner = IoBindingRunner(voice.session, device="cpu", policy=ShapePolicy(32, (1, 2, 4, 8)))
    try:
        via = voice.synthesize_batch(ids, opts)
        assert voice._runner.shapes_seen  # the batch went through IO binding
    finally:
        voice._runner = None
    for a, b in zip(via, plain):
        assert len(a) == len(b) and float(np.abs(a - b).max()) <= 1e-4


def test_only_a_cuda_first_session_takes_the_io_binding_path(base_settings: Settings) -> None:
    rt = base_settings.runtime
    assert wants_io_binding(("CUDAExecutionProvider", "CPUExecutionProvider"), rt)
    assert not wants_io_binding(("CPUExecutionProvider",), rt)
    assert not wants_io_binding(("CUDAExecutionProvider",), dataclasses.replace(rt, cuda_io_binding=False))
