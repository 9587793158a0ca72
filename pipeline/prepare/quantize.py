"""`ttsfarm quantize VOICE`: an INT8 copy of a Piper voice's whole graph, checked against FP32.

This is the whole-graph path (``PiperVoice``, e.g. on CUDA with IO binding). Voices served in two stages
are quantized per stage by `ttsfarm voices prepare` (``pipeline/prepare/piper.py``), which reuses the
quantization and the gate below.

Input is the prepared FP32 graph (the one with ``frame_lengths`` exposed, see ``pipeline/voices/piper/graph.py``). Two modes:

* ``static`` (default): ``quantize_static`` in QDQ format, activations QUInt8 and weights QInt8, with scales
  calibrated by running the voice on real phoneme ids of real sentences (``configs/calibration_en.txt``,
  batch of 1, the voice's default noise scales). Fixed activation scales make a batched item independent of
  its neighbours, which dynamic quantization is not.
* ``dynamic``: ``quantize_dynamic`` with QUInt8 weights, Conv included (MatMul alone quantizes nothing here:
  every MatMul of the graph multiplies two activations).

Only Conv, MatMul and Gemm are quantized (ConvTranspose stays FP32), and every node whose name starts with
one of the excluded prefixes stays FP32 (by default ``INT8_EXCLUDE`` of ``pipeline/voices/piper/graph.py``: the text
encoder, the duration predictor and the decoder, and why). The result is then measured against FP32 on held-out sentences
(``quantize_eval``) and judged by ``settings.quality_gate``. The model goes to ``int8_paths(prepared)[0]``
and the report to ``int8_paths(prepared)[1]`` in either case; ``choose_model`` serves INT8 only when the
report says ``"passed": true``.

``quantize_static`` runs on the dynamic-shaped VITS graph as it is (onnxruntime 1.32): every Conv weight is
already an initializer, so the ``quant_pre_process`` step that onnxruntime's warning suggests is skipped (it
gave a bit-identical FP32 graph after guessing that unrelated ``NonZero`` dimensions are equal).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import logging
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.errors import BAD_OPTION, InputError
from pipeline.prepare.quantize_eval import EVAL_SENTENCES_EN, compare, measure_pair, verdict
from pipeline.settings import CONFIG_DIR, PipelineSettings
from pipeline.voices.base import PhonemeIds, SynthesisOptions
from pipeline.voices.piper.graph import INT8_EXCLUDE, int8_paths, prepare_piper_graph, run_whole
from pipeline.voices.piper.voice import PiperVoice
from pipeline.voices.runtime import SessionFactory, resolve_resource, sha256_file

log = logging.getLogger(__name__)

MODES = ("static", "dynamic")
OP_TYPES = ("Conv", "MatMul", "Gemm")
CALIBRATION_EN = CONFIG_DIR / "calibration_en.txt"


def read_sentences(path: Path) -> list[str]:
    """Non-empty lines of a UTF-8 file, ``#`` comments skipped."""
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def parse_exclude(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """``None`` -> the default prefixes; ``""`` or ``"none"`` -> nothing excluded; else comma-separated prefixes."""
    if value is None:
        return INT8_EXCLUDE
    items = value.split(",") if isinstance(value, str) else list(value)
    prefixes = tuple(p.strip() for p in items if p.strip() and p.strip().lower() != "none")
    return prefixes


def calibration_reader(voice: Any, sentences: Sequence[str], lang: str) -> Any:
    """A ``CalibrationDataReader`` that phonemizes one sentence per call: batch 1, default scales."""
    from onnxruntime.quantization import CalibrationDataReader

    class PhonemeCalibrationReader(CalibrationDataReader):  # type: ignore[misc]
        def __init__(self) -> None:
            self.fed = 0
            self._items: Iterator[str] = iter(sentences)

        def get_next(self) -> dict[str, np.ndarray] | None:
            for text in self._items:
                ids = voice.phonemize(text, lang).ids
                self.fed += 1
                feeds: dict[str, np.ndarray] = voice.feeds([ids], SynthesisOptions())
                return feeds
            return None

        def rewind(self) -> None:
            self._items = iter(sentences)

    return PhonemeCalibrationReader()


def excluded_nodes(model: Any, prefixes: Sequence[str]) -> list[str]:
    """Names of the quantizable nodes that the prefixes keep in FP32."""
    return [n.name for n in model.graph.node if n.op_type in OP_TYPES and any(n.name.startswith(p) for p in prefixes)]


def _count_ops(path: Path) -> dict[str, int]:
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    counts = collections.Counter(n.op_type for n in model.graph.node)
    keep = ("Conv", "ConvTranspose", "MatMul", "Gemm", "ConvInteger", "MatMulInteger", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear")
    return {k: counts[k] for k in keep if counts[k]}


def quantize_graph(
    source: Path,
    target: Path,
    mode: str,
    *,
    exclude: Sequence[str],
    per_channel: bool,
    reader: Any = None,
) -> dict[str, Any]:
    """Write the INT8 graph of ``source`` to ``target``; return what was done (for the report)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    info: dict[str, Any] = {"mode": mode, "op_types": list(OP_TYPES), "per_channel": per_channel, "exclude": list(exclude)}
    start = time.perf_counter()
    model = onnx.load(str(source))
    skip = excluded_nodes(model, exclude)
    info["excluded_nodes"] = len(skip)
    info["quantized_nodes"] = sum(n.op_type in OP_TYPES for n in model.graph.node) - len(skip)
    if mode == "static":
        if reader is None:
            raise InputError("static quantization needs calibration data", code=BAD_OPTION)
        quantize_static(
            model,
            str(target),
            reader,
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=list(OP_TYPES),
            per_channel=per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=skip,
            calibrate_method=CalibrationMethod.MinMax,
        )
        info.update(format="QDQ", activation_type="QUInt8", weight_type="QInt8", calibrate_method="MinMax", calibration_items=reader.fed)
    elif mode == "dynamic":
        quantize_dynamic(
            model,
            str(target),
            op_types_to_quantize=list(OP_TYPES),
            per_channel=per_channel,
            weight_type=QuantType.QUInt8,
            nodes_to_exclude=skip,
        )
        info.update(format="QOperator", activation_type="QUInt8 (per batch, at run time)", weight_type="QUInt8")
    else:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}", code=BAD_OPTION)
    info["quantize_s"] = round(time.perf_counter() - start, 2)
    info["ops_fp32"] = _count_ops(source)
    info["ops_int8"] = _count_ops(target)
    return info


class GraphRunner:
    """Runs one whole Piper graph (FP32 or INT8) on its own session, with the voice's feeds."""

    def __init__(self, voice: PiperVoice, factory: SessionFactory, model: Path) -> None:
        self.voice = voice
        self.session, self.info = factory.create(model)

    def run(self, batch: Sequence[PhonemeIds], opts: SynthesisOptions) -> list[np.ndarray]:
        return run_whole(self.session, self.voice.feeds(batch, opts), self.voice.hop)


def quantize_voice(
    settings: PipelineSettings,
    voice_name: str,
    *,
    mode: str = "static",
    per_channel: bool = False,
    exclude: str | Sequence[str] | None = None,
    calibration: Path | None = None,
    eval_texts: Sequence[str] = EVAL_SENTENCES_EN,
    repeats: int = 3,
    report_copy: Path | None = None,
) -> dict[str, Any]:
    """Quantize one Piper voice, measure it against FP32, write model and report; return the report."""
    import onnxruntime

    if mode not in MODES:
        raise InputError(f"mode must be one of {', '.join(MODES)}, got {mode!r}", code=BAD_OPTION)
    spec = settings.catalogue.get(voice_name)
    if (spec.source or spec.engine) != "piper":
        raise InputError(f"voice {spec.name} is a {spec.engine} voice; only Piper voices are quantized here", code=BAD_OPTION)
    prefixes = parse_exclude(exclude)
    lang = spec.languages[0]
    factory = SessionFactory(settings.runtime)
    voice = PiperVoice(spec, factory, precision="fp32")  # the whole graph, whatever engine serves the voice
    prepared = prepare_piper_graph(resolve_resource(spec.model), settings.runtime.cache_dir)
    model_path, report_path = int8_paths(prepared.path)
    calib_file = Path(calibration) if calibration else CALIBRATION_EN
    if mode == "static" and not calib_file.is_file():
        raise InputError(f"calibration file not found: {calib_file}", code=BAD_OPTION)
    calib_texts = read_sentences(calib_file) if mode == "static" else []
    if mode == "static" and not calib_texts:
        raise InputError(f"no calibration sentences in {calib_file}", code=BAD_OPTION)

    model_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_path.parent, prefix=".quantize-") as tmp:
        candidate = Path(tmp) / model_path.name
        reader = calibration_reader(voice, calib_texts, lang) if mode == "static" else None
        log.info("quantizing %s (%s, exclude %s)", prepared.path.name, mode, ", ".join(prefixes) or "nothing")
        info = quantize_graph(prepared.path, candidate, mode, exclude=prefixes, per_channel=per_channel, reader=reader)

        log.info("evaluating INT8 against FP32 on %d sentences", len(eval_texts))
        start = time.perf_counter()
        items = [voice.phonemize(t, lang).ids for t in eval_texts]
        opts = SynthesisOptions.noiseless()
        runners = GraphRunner(voice, factory, prepared.path), GraphRunner(voice, factory, candidate)
        fp32, int8 = measure_pair(*runners, items, opts, repeats=repeats)
        del runners  # release both sessions before the model file is moved
        measures = compare(fp32, int8, voice.sample_rate, eval_texts)
        eval_s = time.perf_counter() - start
        passed, reason = verdict(measures, settings.quality_gate)

        report_path.unlink(missing_ok=True)  # never leave an old "passed" beside a new model
        candidate.replace(model_path)
    gate = settings.quality_gate
    report: dict[str, Any] = {
        "voice": spec.name,
        "mode": mode,
        "passed": passed,
        "reason": reason,
        "exclusions": list(prefixes),
        "per_channel": per_channel,
        "thresholds": {
            "max_logmel_l1_db": gate.max_logmel_l1_db,
            "max_length_mismatch": gate.max_length_mismatch,
            "require_batch_solo_identical": gate.require_batch_solo_identical,
        },
        "measures": measures,
        "quantization": info,
        "calibration": {"file": str(calib_file), "sentences": len(calib_texts), "scales": "voice defaults"} if mode == "static" else None,
        "evaluation": {"sentences": len(eval_texts), "noise": "off", "timing_repeats": repeats, "eval_s": round(eval_s, 2), "intra_op_threads": settings.runtime.intra_op_threads},
        "model": str(model_path),
        "source_model": str(prepared.path),
        "source_sha256": prepared.source_sha256,
        "int8_sha256": sha256_file(model_path),
        "model_sizes": {"fp32_bytes": prepared.path.stat().st_size, "int8_bytes": model_path.stat().st_size},
        "onnxruntime_version": onnxruntime.__version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    text = json.dumps(report, indent=2, ensure_ascii=False)
    tmp_report = report_path.with_suffix(f".tmp{time.monotonic_ns()}")
    tmp_report.write_text(text, encoding="utf-8")
    tmp_report.replace(report_path)  # readers never see half a report
    if report_copy:
        Path(report_copy).parent.mkdir(parents=True, exist_ok=True)
        Path(report_copy).write_text(text, encoding="utf-8")
    log.info("wrote %s and %s", model_path, report_path)
    return report


def format_summary(report: dict[str, Any]) -> str:
    """A few readable lines of a report."""
    m, sizes, gate = report["measures"], report["model_sizes"], report["thresholds"]
    bs = m["batch_solo_int8"]
    lines = [
        (
            f"voice {report['voice']}: {report['mode']} INT8{' per-channel' if report['per_channel'] else ''}, "
            f"FP32 kept for: {', '.join(report['exclusions']) or 'nothing'}"
        ),
        f"  size          {sizes['fp32_bytes'] / 1e6:.1f} MB -> {sizes['int8_bytes'] / 1e6:.1f} MB",
        f"  speed (RTF)   FP32 {m['rtf_fp32']:.3f}  INT8 {m['rtf_int8']:.3f}  (x{m['speedup']:.2f}, batch 1, {m['items']} sentences)",
        f"  log-mel L1    mean {m['logmel_l1_db']:.2f} dB, worst {m['logmel_l1_db_max']:.2f} dB   (gate <= {gate['max_logmel_l1_db']} dB)",
        (
            f"  lengths       {m['length_mismatch_items']} of {m['items']} differ from FP32"
            f" (max {m['max_length_diff_samples']} samples)   (gate <= {gate['max_length_mismatch']:.0%})"
        ),
        (
            f"  batch = solo  {'yes' if bs['identical'] else 'no'}: {bs['length_differs']} of {bs['items']} lengths differ,"
            f" {bs['value_differs']} differ by > {bs['tolerance']:g}"
            + (f" (max abs diff {bs['max_abs_diff']:.2g})" if bs["max_abs_diff"] is not None else "")
        ),
        f"  verdict       {'PASSED' if report['passed'] else 'FAILED'}: {report['reason']}",
        f"  report        {Path(report['model']).with_suffix('.json')}",
    ]
    if not report["passed"]:
        lines.append("  serving stays on FP32 for this voice")
    return "\n".join(lines)


def main(settings: PipelineSettings, args: argparse.Namespace) -> int:
    """The CLI command: 0 when the INT8 model passed its gate, 1 when it failed (the report says why)."""
    report = quantize_voice(
        settings,
        args.voice,
        mode=args.mode,
        per_channel=bool(args.per_channel),
        exclude=args.exclude,
        calibration=Path(args.calibration) if args.calibration else None,
        report_copy=Path(args.report) if args.report else None,
    )
    print(format_summary(report))
    return 0 if report["passed"] else 1
