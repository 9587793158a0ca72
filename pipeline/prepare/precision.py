"""Precision variants of a stage graph, made at preparation time: FP16 for CUDA, dynamic INT8 to compare.

* FP16 (``to_fp16``): weights and activations in half precision, inputs and outputs kept FP32 (callers feed
  and read FP32), and the operators without half-precision CUDA kernels or whose result must stay exact
  (random draws, ranges, cumulative sums, shape arithmetic) left in FP32. This is the usual precision of the
  CUDA execution provider; whether a voice is served in it is decided by its quality gate.
* Dynamic INT8 (``to_dynamic_int8``): Conv and MatMul weights in UINT8. ONNX Runtime's CUDA provider has no
  kernels for the ConvInteger/MatMulInteger nodes this makes (they run on the CPU), so on a GPU it is a
  measurement of what not to serve; on CPU, static INT8 with calibration is prepared by
  ``pipeline/prepare/quantize.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

FP16_KEEP_FP32 = ("RandomNormalLike", "RandomUniformLike", "RandomNormal", "RandomUniform", "Range", "CumSum", "NonZero",
                  "Resize", "Upsample")


def portable_ir(model: Any) -> Any:
    """Lower the model's IR version to the least its opsets need: onnx writes its newest IR (14 with onnx
    1.23), which onnxruntime-gpu 1.31 refuses (it reads up to 13), while the opsets here need 8 to 10."""
    from onnx import helper

    least = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    model.ir_version = min(model.ir_version, max(least, 7))
    return model


def to_fp16(src: Path, dst: Path) -> Path:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    # With shape inference the converter knows every tensor's type and inserts the casts around the operators
    # kept in FP32; without it Piper's acoustic graph came out mixing float and float16 inputs of one Mul.
    try:
        half = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, op_block_list=list(FP16_KEEP_FP32))
    except Exception:  # noqa: BLE001 - a graph shape inference cannot follow: convert without it
        half = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, disable_shape_infer=True,
                                        op_block_list=list(FP16_KEEP_FP32))
    tmp = dst.with_name(dst.name + ".tmp")
    onnx.save(portable_ir(half), str(tmp))
    tmp.replace(dst)
    return dst


def to_dynamic_int8(src: Path, dst: Path) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = dst.with_name(dst.stem + ".tmp.onnx")
    import onnx

    quantize_dynamic(str(src), str(tmp), weight_type=QuantType.QUInt8, op_types_to_quantize=["Conv", "MatMul"])
    onnx.save(portable_ir(onnx.load(str(tmp))), str(tmp))
    tmp.replace(dst)
    return dst
