"""``runtime.cpu_arena_extend_strategy``: one CPU arena registered with onnxruntime's environment that the process's
sessions share, grown as the setting says; a session on it gives the same output as one with an arena of its own;
an unknown strategy is a coded settings error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from pipeline.errors import BAD_OPTION, InputError
from pipeline.settings import RuntimeSettings
from pipeline.voices.runtime import SessionFactory


def _model(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.arange(16, dtype=np.float32).tolist())
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Tanh", ["m"], ["y"])],
                              "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_sessions_on_the_shared_arena_say_what_their_own_arenas_say(tmp_path: Path) -> None:
    model = _model(tmp_path / "m.onnx")
    x = np.random.default_rng(1).standard_normal((7, 4)).astype(np.float32)
    own, _ = SessionFactory(RuntimeSettings(device="cpu")).create(model)
    shared_factory = SessionFactory(RuntimeSettings(device="cpu", cpu_arena_extend_strategy="kSameAsRequested"))
    assert shared_factory.session_options().get_session_config_entry("session.use_env_allocators") == "1"
    shared, _ = shared_factory.create(model)
    for n in (1, 7, 3):  # other shapes on the one arena
        np.testing.assert_array_equal(shared.run(None, {"x": x[:n]})[0], own.run(None, {"x": x[:n]})[0])


def test_without_the_setting_each_session_keeps_its_own_arena() -> None:
    opts = SessionFactory(RuntimeSettings(device="cpu")).session_options()
    with pytest.raises(RuntimeError):  # not set at all
        opts.get_session_config_entry("session.use_env_allocators")


def test_an_unknown_strategy_is_a_coded_error() -> None:
    with pytest.raises(InputError) as err:
        RuntimeSettings(cpu_arena_extend_strategy="kDoubleIt")
    assert err.value.code == BAD_OPTION and "cpu_arena_extend_strategy" in str(err.value)
