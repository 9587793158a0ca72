"""Piper's acoustic noise drawn from a seed the caller gives, so that a segment's frames can be made again.

Joe's graph draws its noise inside the graph (two ``RandomNormalLike`` nodes: the duration predictor's ``[B, 2, N]``
and the prior's ``[B, 192, T]``), anew on every run, so a segment run twice gets other frames and even another
length (docs/lab/host-and-redis-path.md, "The frames out of Redis"). ``seed_noise`` replaces each such node
with a lookup into one fixed table of standard normal values (``NOISE_TABLE`` of them, an initializer drawn once at
preparation from ``TABLE_SEED``): item ``b``'s value at channel ``c`` and time ``t`` is
``table[(offset[b] + c * CHANNEL_STRIDE + t) mod NOISE_TABLE]``, where ``offset`` is the new graph input
``noise_offsets`` (int64 ``[B]``). A lookup is exact on every provider, the same item gets the same noise in any batch
and with any padding (its values depend on its own offset and positions only), and an item of up to
``CHANNEL_STRIDE`` frames never meets the same value twice. The same offset thus gives the same frames, bit for bit,
where the graph is batch-invariant (tests/test_piper_noise.py); a random offset per call gives noise like the graph's
own. The multiplications by ``noise_scale`` / ``noise_w`` after each node are unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pipeline.errors import MODEL_CORRUPT, ModelError

NOISE_OFFSETS = "noise_offsets"  # int64 [B]: each item's offset into the table, any non-negative value (taken modulo)
NOISE_TABLE = 1 << 20  # values in the table (4 MiB of float32)
CHANNEL_STRIDE = 4099  # table positions between one channel's values and the next's: more frames than a segment makes
TABLE_SEED = 20261203


class _Ops:
    """Appends nodes named under one prefix; each call returns its output's name."""

    def __init__(self, nodes: list[Any], prefix: str) -> None:
        self.nodes, self.prefix = nodes, prefix

    def __call__(self, kind: str, inputs: list[str], name: str) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(kind, inputs, [self.prefix + name], name=self.prefix + name))
        return self.prefix + name


def seed_noise(model: Any) -> int:
    """Replace the ``RandomNormalLike`` nodes of ``model`` (an ``onnx.ModelProto``, edited in place) by table lookups
    keyed by the new input ``noise_offsets``; the count replaced. ``ModelError(MODEL_CORRUPT)`` for a random node of
    another kind or rank, which a redo could not reproduce."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    randoms = [n for n in graph.node if n.op_type.startswith("Random")]
    if not randoms:
        return 0
    if any(n.op_type != "RandomNormalLike" for n in randoms):
        raise ModelError(f"random nodes {sorted({n.op_type for n in randoms})}: only RandomNormalLike can be seeded", code=MODEL_CORRUPT)
    standard = {"mean": 0.0, "scale": 1.0, "dtype": TensorProto.FLOAT}
    for node in randoms:
        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            if attr.name in standard and value != standard[attr.name]:
                raise ModelError(f"{node.name}: a RandomNormalLike with {attr.name} {value}", code=MODEL_CORRUPT)
    table = np.random.default_rng(TABLE_SEED).standard_normal(NOISE_TABLE, dtype=np.float32)
    p = "/noise/"
    consts = {
        p + "table": table,
        p + "zero": np.array(0, dtype=np.int64), p + "one": np.array(1, dtype=np.int64),
        p + "stride": np.array(CHANNEL_STRIDE, dtype=np.int64), p + "size": np.array(NOISE_TABLE, dtype=np.int64),
        p + "at1": np.array([1], dtype=np.int64), p + "at2": np.array([2], dtype=np.int64), p + "at3": np.array([3], dtype=np.int64),
        p + "axis0": np.array([0], dtype=np.int64), p + "axis1": np.array([1], dtype=np.int64),
        p + "rows": np.array([-1, 1, 1], dtype=np.int64),
    }
    graph.initializer.extend(numpy_helper.from_array(v, name=k) for k, v in consts.items())
    graph.input.append(helper.make_tensor_value_info(NOISE_OFFSETS, TensorProto.INT64, ["batch"]))
    # per node: the like tensor's [C, T] positions c * stride + t, each item's offset added, modulo the table, looked up
    replacements: dict[int, list[Any]] = {}
    for k, node in enumerate(randoms):
        q = f"{p}{k}/"
        like, out = node.input[0], node.output[0]
        nodes: list[Any] = []
        op = _Ops(nodes, q)
        shape = op("Shape", [like], "shape")
        channels = op("Squeeze", [op("Slice", [shape, p + "at1", p + "at2"], "c1"), p + "axis0"], "c")
        frames = op("Squeeze", [op("Slice", [shape, p + "at2", p + "at3"], "t1"), p + "axis0"], "t")
        c_range = op("Unsqueeze", [op("Range", [p + "zero", channels, p + "one"], "c_range"), p + "axis1"], "c_col")
        t_range = op("Unsqueeze", [op("Range", [p + "zero", frames, p + "one"], "t_range"), p + "axis0"], "t_row")
        grid = op("Add", [op("Mul", [c_range, p + "stride"], "c_step"), t_range], "grid")
        index = op("Add", [op("Reshape", [NOISE_OFFSETS, p + "rows"], "offset"), op("Unsqueeze", [grid, p + "axis0"], "grid1")], "index")
        wrapped = op("Mod", [index, p + "size"], "wrapped")
        nodes.append(helper.make_node("Gather", [p + "table", wrapped], [out], name=q + "noise", axis=0))
        replacements[id(node)] = nodes
    # each replacement goes where its node was, so the graph stays topologically sorted
    edited = [new for node in graph.node for new in replacements.get(id(node), [node])]
    del graph.node[:]
    graph.node.extend(edited)
    return len(randoms)
