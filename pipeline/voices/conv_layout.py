"""One-dimensional convolutions written as two-dimensional ones, for onnxruntime's CPU kernels.

onnxruntime's CPU provider runs a rank-4 ``Conv`` through its blocked-layout (NCHWc) kernels and a rank-3 one
through a slower general path. The same convolution over ``[B, C, 1, T]`` with a ``[O, I, 1, K]`` kernel gives the
same numbers: each ``Conv`` or ``ConvTranspose`` whose weight is a rank-3 initializer becomes
``Unsqueeze(axis 2) -> Conv(rank 4) -> Squeeze(axis 2)``, so the tensors between the nodes keep their shapes and
every other node is untouched. On one intra-op thread joe's decoder and acoustic stage run faster so, with the same
numbers to 2e-7 (the figures: docs/lab/voices-and-quality.md, "Convolutions in two dimensions";
``tests/test_conv_layout.py`` checks the numbers). On CUDA nothing changes: cuDNN runs a one-dimensional convolution
as a two-dimensional one anyway.
"""

from __future__ import annotations

from typing import Any

AXES = "ttsfarm_conv2d_axes"  # the int64 [2] both the Unsqueeze and the Squeeze read


def conv1d_as_2d(model: Any) -> int:
    """Rewrite ``model`` (an ``onnx.ModelProto``, edited in place) as the module docstring says; the count of nodes
    rewritten. A Conv whose weight is not an initializer (a quantized graph's ``DequantizeLinear`` output) stays."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = model.graph
    weights = {w.name: w for w in graph.initializer}
    fed: set[str] = set()  # a weight shared by several nodes is reshaped once
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    axes_input = opset >= 13  # Unsqueeze and Squeeze take their axes as an input from opset 13, an attribute before
    nodes: list[Any] = []
    count = 0
    for node in graph.node:
        weight = weights.get(node.input[1]) if node.op_type in ("Conv", "ConvTranspose") and len(node.input) > 1 else None
        if weight is None or (len(weight.dims) != 3 and weight.name not in fed):
            nodes.append(node)
            continue
        if weight.name not in fed:
            weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight)[:, :, None, :], weight.name))
            fed.add(weight.name)
        wide_in, wide_out = f"{node.output[0]}/conv2d_in", f"{node.output[0]}/conv2d_out"
        attrs = {a.name: _widened(a.name, helper.get_attribute_value(a)) for a in node.attribute}
        axes: dict[str, Any] = {} if axes_input else {"axes": [2]}
        nodes.append(helper.make_node("Unsqueeze", [node.input[0], *([AXES] if axes_input else [])], [wide_in],
                                      name=f"{node.name}/conv2d_unsqueeze", **axes))
        nodes.append(helper.make_node(node.op_type, [wide_in, *node.input[1:]], [wide_out], name=node.name, **attrs))
        nodes.append(helper.make_node("Squeeze", [wide_out, *([AXES] if axes_input else [])], [node.output[0]],
                                      name=f"{node.name}/conv2d_squeeze", **axes))
        count += 1
    if count:
        if axes_input:
            graph.initializer.append(numpy_helper.from_array(np.array([2], dtype=np.int64), AXES))
        del graph.node[:]
        graph.node.extend(nodes)
    return count


def _widened(name: str, value: Any) -> Any:
    """A one-dimensional Conv attribute for the two-dimensional node (height 1: no stride, pad or dilation there)."""
    if name in ("kernel_shape", "strides", "dilations"):
        return [1, *value]
    if name == "pads":  # [begin, end] -> [top, left, bottom, right]
        return [0, value[0], 0, value[1]]
    if name == "output_padding":
        return [0, *value]
    if name == "output_shape":
        return [1, *value]
    return value  # group, auto_pad ("SAME_*" pads the time axis alone: the kernel is one row tall)
