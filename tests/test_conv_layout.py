"""One-dimensional convolutions rewritten as two-dimensional ones (pipeline/voices/conv_layout.py) give the numbers
the original graph gives, for every attribute a Conv or ConvTranspose can carry, in both opset forms of Squeeze."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from pipeline.voices.conv_layout import conv1d_as_2d


def _graph(opset: int) -> Any:
    """x [1, 4, T] through convolutions of every kind; one weight shared by two nodes."""
    rng = np.random.default_rng(7)
    w = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.3  # noqa: E731
    inits = [numpy_helper.from_array(a, name) for name, a in (
        ("w_pad", w(6, 4, 5)), ("b_pad", w(6)), ("w_dil", w(6, 6, 3)), ("w_grp", w(6, 3, 3)), ("w_up", w(6, 4, 4)),
        ("b_up", w(4)), ("w_same", w(4, 4, 4)), ("w_2d", w(4, 4, 1, 1)))]
    nodes = [
        helper.make_node("Conv", ["x", "w_pad", "b_pad"], ["a"], name="pad", pads=[2, 2], strides=[2]),
        helper.make_node("LeakyRelu", ["a"], ["a1"], alpha=0.1),
        helper.make_node("Conv", ["a1", "w_dil"], ["b"], name="dil", pads=[3, 3], dilations=[3]),
        helper.make_node("Conv", ["b", "w_grp"], ["c"], name="grp", pads=[1, 1], group=2),
        helper.make_node("Conv", ["c", "w_dil"], ["c2"], name="shared", pads=[1, 1]),  # the same weight again
        helper.make_node("ConvTranspose", ["c2", "w_up", "b_up"], ["d"], name="up", strides=[3], pads=[1, 1], output_padding=[1]),
        helper.make_node("Conv", ["d", "w_same"], ["e"], name="same", auto_pad="SAME_UPPER"),
        helper.make_node("Unsqueeze", ["e", "ax"] if opset >= 13 else ["e"], ["e4"], **({} if opset >= 13 else {"axes": [3]})),
        helper.make_node("Conv", ["e4", "w_2d"], ["y"], name="already_2d"),  # a rank-4 Conv stays as it is
    ]
    if opset >= 13:
        inits.append(numpy_helper.from_array(np.array([3], dtype=np.int64), "ax"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, "T"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, "U", 1])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _run(model: Any, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("opset", [11, 17])
def test_the_rewritten_graph_gives_the_same_numbers(opset: int) -> None:
    model = _graph(opset)
    x = np.random.default_rng(1).standard_normal((1, 4, 37)).astype(np.float32)
    before = _run(model, x)
    wide = onnx.ModelProto()
    wide.CopyFrom(model)
    assert conv1d_as_2d(wide) == 6  # every one-dimensional node, the shared weight's two uses included
    onnx.checker.check_model(wide)
    convs = [n for n in wide.graph.node if n.op_type in ("Conv", "ConvTranspose")]
    ranks = {w.name: len(w.dims) for w in wide.graph.initializer}
    assert all(ranks[n.input[1]] == 4 for n in convs)
    assert [n.op_type for n in wide.graph.node].count("Squeeze") == 6
    after = _run(wide, x)
    assert after.shape == before.shape
    assert np.max(np.abs(after - before)) <= 1e-5
    assert conv1d_as_2d(wide) == 0  # nothing left to rewrite
