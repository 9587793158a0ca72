"""A multi-speaker Piper graph made single-speaker: its speaker id input replaced by a constant, before preparation.

A multi-speaker Piper model takes ``sid`` int64 [B] beside its phonemes; the speaker embedding it selects conditions
the duration predictor, the flow and the decoder. Fixing the speaker in the graph (``sid`` = the chosen id repeated
over the batch, ``Expand`` of a constant to the shape of ``input_lengths``) leaves a graph with the inputs of a
single-speaker voice, so the split into stages, the gates and serving treat it as one: each speaker of the model
becomes a voice of its own (``ttsfarm voices add NAME MODEL --speaker S``).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import MODEL_CORRUPT, ModelError
from pipeline.voices.piper.graph import PIPER_INPUTS


def fix_speaker(source: Path, out: Path, speaker: int, sid_input: str = "sid") -> Path:
    """Write ``source`` with ``sid_input`` fixed to ``speaker`` to ``out``."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    kept = [i for i in graph.input if i.name != sid_input]
    if len(kept) == len(graph.input):
        raise ModelError(f"{source} has no {sid_input!r} input: it is not a multi-speaker Piper voice", code=MODEL_CORRUPT)
    del graph.input[:]
    graph.input.extend(kept)
    const, shape = f"{sid_input}_fixed", f"{sid_input}_batch_shape"
    graph.initializer.append(numpy_helper.from_array(np.array([speaker], dtype=np.int64), const))
    fixed = [helper.make_node("Shape", [PIPER_INPUTS[1]], [shape], name=f"{sid_input}_shape"),
             helper.make_node("Expand", [const, shape], [sid_input], name=f"{sid_input}_fixed_expand")]
    nodes = [*fixed, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(out))
    return out
