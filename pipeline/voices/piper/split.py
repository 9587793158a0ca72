"""Splits a prepared Piper VITS graph into its two stages by graph extraction.

* acoustic: ``input``, ``input_lengths``, ``scales``, ``noise_offsets`` (each item's noise, ``noise.py``) ->
  ``latent`` [B, 192, T] (the flow's output times the frame mask, what the HiFi-GAN decoder reads),
  ``frame_lengths`` [B] and ``durations`` [B, 1, N] (the ``Ceil`` of each phoneme's predicted length: frames per
  id, 0 on padding; it sums to ``frame_lengths``).
* decoder: ``latent`` [B, 192, T] -> ``output`` [B, 1, T * hop].

The split tensor is found from the graph's structure, not its name: walking back from ``output``, it is
the earliest tensor that every path from the graph inputs to ``output`` goes through (the last single
tensor the decoder depends on), and it must feed a Conv (the decoder's first layer). In the joe voice
that is ``/Mul_7_output_0``; acoustic then decoder reproduces the whole graph (max abs diff 0.0 as cut; 3.7e-05
since both stages convolve in two dimensions, ``conv_layout.py``, whose kernels sum in another order;
tests/test_prepare.py holds it to 1e-3). The durations tensor is the ``Ceil`` that the frame-length chain
(``Ceil -> ReduceSum -> Clip -> Cast``) starts from.
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import MODEL_CORRUPT, ModelError
from pipeline.voices.conv_layout import conv1d_as_2d
from pipeline.voices.piper.graph import AUDIO, FRAME_LENGTHS, PIPER_INPUTS, find_frame_chain
from pipeline.voices.piper.noise import NOISE_OFFSETS, seed_noise

log = logging.getLogger(__name__)

LATENT = "latent"
DURATIONS = "durations"
DECODER_CONTEXT = 10  # frames each side: windows vocoded with this much context match whole decoding (~1e-6)


@dataclass(frozen=True)
class PiperSplit:
    split_tensor: str
    durations_tensor: str
    channels: int


def _dynamic_tensors(graph: Any) -> set[str]:
    """Tensors that depend on a graph input (constants and initializers do not)."""
    dynamic = {i.name for i in graph.input}
    for node in graph.node:  # graph.node is topologically sorted in a valid model
        if any(name in dynamic for name in node.input):
            dynamic.update(o for o in node.output if o)
    return dynamic


def find_split(graph: Any, output: str = AUDIO) -> PiperSplit:
    """Where the decoder starts: see the module docstring. ``ModelError(MODEL_CORRUPT)`` if no such tensor."""
    order = {o: k for k, node in enumerate(graph.node) for o in node.output}
    producer = {o: node for node in graph.node for o in node.output}
    dynamic = _dynamic_tensors(graph)
    inputs = {i.name for i in graph.input}
    frontier = [(-order[output], output)]
    seen = {output}
    cut = None
    while frontier:
        if len(frontier) == 1 and frontier[0][1] != output:
            cut = frontier[0][1]
        _, name = heapq.heappop(frontier)  # the latest tensor in topological order
        if name in inputs:
            break
        for parent in producer[name].input:
            if parent in dynamic and parent not in seen:
                seen.add(parent)
                heapq.heappush(frontier, (-order.get(parent, -1), parent))
    consumers = [n for n in graph.node if cut is not None and cut in n.input]
    if cut is None or not consumers or any(n.op_type != "Conv" for n in consumers):
        raise ModelError("not a Piper VITS graph: no single tensor feeds the decoder", code=MODEL_CORRUPT)
    weights = {w.name: w for w in graph.initializer}
    conv_weight = weights.get(consumers[0].input[1])
    if conv_weight is None:
        raise ModelError("not a Piper VITS graph: the decoder's first Conv has no weight initializer", code=MODEL_CORRUPT)
    _, ceil = find_frame_chain(graph)
    return PiperSplit(split_tensor=cut, durations_tensor=ceil, channels=int(conv_weight.dims[1]))


def split_piper_graph(prepared: Path, acoustic_out: Path, decoder_out: Path) -> PiperSplit:
    """Write the acoustic and decoder graphs of the prepared (``frame_lengths``) graph."""
    import onnx
    from onnx import helper

    try:
        model = onnx.load(str(prepared))
    except Exception as exc:
        raise ModelError(f"cannot read ONNX file {prepared.name}: {exc}", code=MODEL_CORRUPT) from exc
    split = find_split(model.graph)
    graph = model.graph
    graph.node.append(helper.make_node("Identity", [split.split_tensor], [LATENT], name="ttsfarm_latent"))
    graph.node.append(helper.make_node("Identity", [split.durations_tensor], [DURATIONS], name="ttsfarm_durations"))
    graph.output.append(helper.make_tensor_value_info(LATENT, onnx.TensorProto.FLOAT, ["batch", split.channels, "frames"]))
    graph.output.append(helper.make_tensor_value_info(DURATIONS, onnx.TensorProto.FLOAT, ["batch", 1, "phonemes"]))
    acoustic = _extract(model, list(PIPER_INPUTS), [LATENT, FRAME_LENGTHS, DURATIONS], {})
    seeded = seed_noise(acoustic)  # a segment's frames made again from its seed (noise.py)
    decoder = _extract(model, [split.split_tensor], [AUDIO], {split.split_tensor: LATENT})
    for part, path in ((acoustic, acoustic_out), (decoder, decoder_out)):
        conv1d_as_2d(part)  # the CPU's faster kernels (conv_layout.py); check_split holds the result to the whole graph
        onnx.checker.check_model(part)
        onnx.save(part, str(path))
    log.info("split %s at %s (%d channels): acoustic %d nodes (%d noise sources from %s), decoder %d nodes", prepared.name,
             split.split_tensor, split.channels, len(acoustic.graph.node), seeded, NOISE_OFFSETS, len(decoder.graph.node))
    return split


def _extract(model: Any, inputs: list[str], outputs: list[str], rename: dict[str, str]) -> Any:
    """The sub-graph computing ``outputs`` from ``inputs`` (and initializers), inputs renamed per ``rename``."""
    from onnx import helper

    graph = model.graph
    producer = {o: node for node in graph.node for o in node.output}
    needed: dict[int, Any] = {}
    wanted, seen = list(outputs), set(inputs)
    while wanted:
        name = wanted.pop()
        if name in seen or name not in producer:
            continue
        seen.add(name)
        node = producer[name]
        if id(node) not in needed:
            needed[id(node)] = node
            wanted.extend(i for i in node.input if i)
    position = {id(node): k for k, node in enumerate(graph.node)}
    nodes = sorted(needed.values(), key=lambda n: position[id(n)])
    used = {i for node in nodes for i in node.input}
    declared = {v.name: v for v in (*graph.input, *graph.output)}
    graph_inputs = []
    for name in inputs:
        if name in declared:
            graph_inputs.append(declared[name])
        else:
            graph_inputs.append(helper.make_tensor_value_info(rename.get(name, name), 1, ["batch", "channels", "frames"]))
    for node in nodes:
        for k, name in enumerate(node.input):
            if name in rename:
                node.input[k] = rename[name]
    initializers = [w for w in graph.initializer if w.name in used]
    sub = helper.make_graph(nodes, graph.name, graph_inputs, [declared[o] for o in outputs], initializers)
    out = helper.make_model(sub, opset_imports=model.opset_import, ir_version=model.ir_version)
    missing = {i for node in nodes for i in node.input if i} - {o for node in nodes for o in node.output} - {
        w.name for w in initializers} - {v.name for v in graph_inputs}
    if missing:
        raise ModelError(f"split leaves tensors without a producer: {sorted(missing)[:5]}", code=MODEL_CORRUPT)
    return out
