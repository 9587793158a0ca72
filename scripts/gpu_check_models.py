"""The stage models the device check measures, with realistic inputs made by the project's own voices.

Each served voice contributes its stage graphs (acoustic and vocoder of a two-stage voice; the whole graph
of a one-graph voice). Inputs come from the workload texts of ``bench.run`` run through the voice's
frontend (phoneme ids) and, for a vocoder, through its acoustic stage once (frames), so the check feeds
each graph what the farm feeds it. Feeds are built from the graph's declared inputs, so the check needs
no graph-specific code beyond the frame layout a vocoder declares.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("gpu_check")
MAX_ITEMS = 32
# One-graph voices left out of the GPU sweep by default, with why.
LEFT_OUT = {"kokoro": "one INT8-only graph with the batch fixed at 1: its ConvInteger/MatMulInteger nodes have no CUDA kernels"}


@dataclass(frozen=True)
class InputMeta:
    name: str
    dtype: str  # numpy dtype name
    shape: tuple[int | str, ...]  # ints for static dims, names for symbolic ones


@dataclass
class StageModel:
    voice: str
    role: str  # "acoustic", "vocoder" or "whole"
    path: Path
    sample_rate: int
    hop: int
    inputs: list[InputMeta]
    items: list[Any] = field(repr=False)  # phoneme-id tuples (acoustic, whole) or (frames, channels) arrays (vocoder)
    item_audio_s: list[float] = field(repr=False)
    layout: str = ""  # a vocoder's frame layout, "channels_first" ([B, C, T]) or "time_first" ([B, T, C])
    max_batch: int = 64  # the stage's own batch limit (1 for a graph whose batch axis is fixed)

    @property
    def label(self) -> str:
        return f"{self.voice}.{self.role}"

    def batch_items(self, batch: int) -> list[int]:
        """Indices of ``batch`` items of similar length around the median (as a length bucket forms them)."""
        order = sorted(range(len(self.items)), key=lambda i: _size(self.items[i]))
        start = max(0, len(order) // 2 - batch // 2)
        return [order[(start + k) % len(order)] for k in range(batch)]

    def feeds(self, batch: int) -> tuple[dict[str, np.ndarray], float]:
        """The input tensors of one batch, and the speech seconds it makes."""
        idx = self.batch_items(batch)
        chosen = [self.items[i] for i in idx]
        return build_feeds(self.inputs, chosen, self.layout), float(sum(self.item_audio_s[i] for i in idx))


def _size(item: Any) -> int:
    return int(item.shape[0]) if isinstance(item, np.ndarray) else len(item)


def read_inputs(path: Path) -> list[InputMeta]:
    import onnx
    from onnx import helper

    model = onnx.load(str(path), load_external_data=False)
    init = {i.name for i in model.graph.initializer}
    out = []
    for inp in model.graph.input:
        if inp.name in init:
            continue
        t = inp.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in t.shape.dim)
        out.append(InputMeta(inp.name, np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).name, dims))
    return out


def build_feeds(inputs: list[InputMeta], items: list[Any], layout: str = "") -> dict[str, np.ndarray]:
    """Padded tensors for ``items`` from the graph's declared inputs (ids, lengths, scales, ratios, frames)."""
    n = len(items)
    feeds: dict[str, np.ndarray] = {}
    for meta in inputs:
        dtype = np.dtype(meta.dtype)
        rank = len(meta.shape)
        if rank == 3 and dtype.kind == "f":  # frames: [B, C, T] or [B, T, C]; C is the static dim
            t_max = max(int(f.shape[0]) for f in items)
            channels = int(items[0].shape[1])
            channels_first = layout == "channels_first" if layout else meta.shape[1] == channels
            arr = np.zeros((n, channels, t_max) if channels_first else (n, t_max, channels), dtype=dtype)
            for row, f in enumerate(items):
                if channels_first:
                    arr[row, :, : f.shape[0]] = f.T
                else:
                    arr[row, : f.shape[0]] = f
            feeds[meta.name] = arr
        elif rank == 2 and dtype.kind in "iu":  # phoneme ids, padded with 0
            width = max(len(ids) for ids in items)
            arr = np.zeros((n, width), dtype=dtype)
            for row, ids in enumerate(items):
                arr[row, : len(ids)] = ids
            feeds[meta.name] = arr
        elif rank == 1 and dtype.kind in "iu":  # lengths, or speaker ids (0)
            lengths = "len" in meta.name.lower()
            size = meta.shape[0] if isinstance(meta.shape[0], int) and meta.shape[0] > 0 else n
            feeds[meta.name] = np.array([len(ids) for ids in items] if lengths else [0] * size, dtype=dtype)
        elif rank == 1 and dtype.kind == "f":
            if meta.shape[0] == 3:  # Piper's scales: noise off, length 1, noise_w off (deterministic)
                feeds[meta.name] = np.array([0.0, 1.0, 0.0], dtype=dtype)
            else:  # speed / f0 / energy ratios
                feeds[meta.name] = np.ones(n if not isinstance(meta.shape[0], int) or meta.shape[0] != 1 else 1, dtype=dtype)
        else:
            raise ValueError(f"input {meta.name} {meta.dtype}{list(meta.shape)}: no feed rule")
    return feeds


def workload_texts(lang: str) -> list[str]:
    from bench.run import PARAGRAPHS_EN, SHORT_EN, SHORT_ZH

    return list(SHORT_ZH) if lang == "zh" else [*SHORT_EN, *PARAGRAPHS_EN]


def voice_items(settings: Any, voice: Any, lang: str) -> list[tuple[int, ...]]:
    from pipeline.synth import plan

    ids: list[tuple[int, ...]] = []
    for text in workload_texts(lang):
        for p in plan(text, voice.name, settings):
            if p.segment.lang == lang:
                ids.append(tuple(voice.phonemize(p.segment.text, lang).ids))
    return ids[:MAX_ITEMS]


def stage_paths(voice: Any) -> dict[str, Path]:
    """role -> model file of a built (not necessarily loaded) voice."""
    acoustic, vocoder = getattr(voice, "acoustic", None), getattr(voice, "vocoder", None)
    if acoustic is not None and vocoder is not None:
        return {"acoustic": Path(acoustic.session.model), "vocoder": Path(vocoder.session.model)}
    model = getattr(voice, "model", None)
    return {"whole": Path(model)} if model is not None else {}


def discover_models(settings: Any, wanted: list[str]) -> list[StageModel]:
    """Every served voice's stage models with their inputs (CPU reference voices build the items)."""
    from pipeline.voices.bank import VoiceBank
    from pipeline.voices.base import SynthesisOptions

    runtime = dataclasses.replace(settings.runtime, device="cpu", warmup=False, precision="fp32")
    bank = VoiceBank(settings.catalogue, runtime)
    models: list[StageModel] = []
    for name in wanted or bank.concrete_names():
        spec = settings.catalogue.get(name)
        if spec.engine in LEFT_OUT and not wanted:
            log.info("voice %s left out: %s", name, LEFT_OUT[spec.engine])
            continue
        voice = bank.get(name)
        lang = voice.languages[0]
        ids = voice_items(settings, voice, lang)
        paths = stage_paths(voice)
        opts = SynthesisOptions.noiseless()
        if "whole" in paths:
            audio = [voice.synthesize_batch([i], opts)[0] for i in ids]
            hop = int(getattr(voice, "hop", 256))
            models.append(StageModel(name, "whole", paths["whole"], voice.sample_rate, hop, read_inputs(paths["whole"]),
                                     ids, [len(a) / voice.sample_rate for a in audio]))
            continue
        acoustic = [voice.acoustic.run([i], opts)[0] for i in ids]
        hop = int(voice.vocoder.hop)
        seconds = [a.frames.shape[0] * hop / voice.sample_rate for a in acoustic]
        models.append(StageModel(name, "acoustic", paths["acoustic"], voice.sample_rate, hop, read_inputs(paths["acoustic"]), ids, seconds,
                                 max_batch=int(voice.acoustic.max_batch)))
        models.append(StageModel(name, "vocoder", paths["vocoder"], voice.sample_rate, hop, read_inputs(paths["vocoder"]),
                                 [np.asarray(a.frames, dtype=np.float32) for a in acoustic], seconds,
                                 layout=getattr(voice.vocoder, "layout", ""), max_batch=int(voice.vocoder.max_batch)))
    return models


def precision_variant(path: Path, precision: str, work: Path, label: str) -> Path:
    """The model in ``precision``: FP32 as served, FP16 with FP32 inputs/outputs, dynamic INT8."""
    from pipeline.prepare.precision import to_dynamic_int8, to_fp16

    if precision == "fp32":
        return path
    out = work / f"{label}.{precision}.onnx"
    if out.is_file():
        return out
    if precision == "fp16":
        return to_fp16(path, out)
    if precision == "int8":
        return to_dynamic_int8(path, out)
    raise ValueError(f"unknown precision {precision!r}")


def cache_files_to_carry(settings: Any) -> list[str]:
    """Model-cache files a bare device cannot rebuild: the prepared folders of voices whose preparation needs
    tools serving does not have (a conversion); voices prepared on first use (the Piper split) build there."""
    from pipeline.prepare.registry import preparer_for
    from pipeline.voices.prepared import prepared_dir, source_fingerprint

    cache = settings.runtime.cache_dir
    out: list[str] = []
    for name, spec in settings.catalogue.voices.items():
        if spec.engine in ("blend", *LEFT_OUT):
            continue
        preparer = preparer_for(spec)
        if preparer.on_first_use:
            continue
        folder = prepared_dir(cache, name, source_fingerprint(preparer.sources(spec), preparer.version))
        out += sorted(str(p.relative_to(cache)) for p in folder.rglob("*") if p.is_file())
    return out


if __name__ == "__main__":  # python -m scripts.gpu_check_models --list-cache: what scripts/gpu_bundle.sh carries
    import os
    import sys

    from wire.settings import load_settings

    if sys.argv[1:] == ["--list-cache"]:
        print("\n".join(cache_files_to_carry(load_settings(env=dict(os.environ)))))
