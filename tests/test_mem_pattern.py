"""``runtime.cpu_mem_pattern``: CPU sessions are made without onnxruntime's per-shape memory plans unless the setting
asks for them (a plan takes all of a run's tensors from the arena as one block per input shape, and the arena keeps
the largest: docs/lab/memory.md, "Two sources found and fixed"); CUDA sessions keep onnxruntime's default; the output is the same
either way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from pipeline.settings import RuntimeSettings
from wire.settings import load_settings
from pipeline.voices.runtime import SessionFactory


def _model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8], (np.arange(64, dtype=np.float32) / 64).tolist())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m0"]), helper.make_node("Tanh", ["m0"], ["t0"]),
             helper.make_node("MatMul", ["t0", "w"], ["m1"]), helper.make_node("Tanh", ["m1"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_cpu_sessions_plan_no_memory_patterns_by_default() -> None:
    assert load_settings(env={}).runtime.cpu_mem_pattern is False  # configs/settings.toml agrees with the class
    factory = SessionFactory(RuntimeSettings(device="cpu"))
    assert factory.session_options().enable_mem_pattern is False
    assert factory.session_options(cuda=True).enable_mem_pattern is True  # onnxruntime's default on CUDA


def test_the_setting_turns_them_back_on() -> None:
    factory = SessionFactory(RuntimeSettings(device="cpu", cpu_mem_pattern=True))
    assert factory.session_options().enable_mem_pattern is True
    env = load_settings(env={"TTSFARM_RUNTIME_CPU_MEM_PATTERN": "true"})
    assert env.runtime.cpu_mem_pattern is True


def test_outputs_are_the_same_with_and_without(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    without, _ = SessionFactory(RuntimeSettings(device="cpu")).create(model)
    planned, _ = SessionFactory(RuntimeSettings(device="cpu", cpu_mem_pattern=True)).create(model)
    x = np.random.default_rng(3).standard_normal((300, 8)).astype(np.float32)
    for n in (1, 300, 17, 64, 2):  # shapes in any order
        np.testing.assert_array_equal(without.run(None, {"x": x[:n]})[0], planned.run(None, {"x": x[:n]})[0])
