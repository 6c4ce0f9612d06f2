"""OpenVINO graphs of a grader: the plain ONNX graph converted to OpenVINO IR, and its INT8 versions.

The source is the unfused ONNX export (attention op by op), not the PyTorch model: ONNX Runtime's fused
MultiHeadAttention is no OpenVINO op, and the ONNX route reuses the one exporter that already handles pruned
layers (uneven heads, 0-head stubs, narrowed FFNs); its IR matches PyTorch within 1e-6 on MiniLM.

Precisions, each judged before it can ship (build.py): fp32 by the parity gate (1e-4, same grades); bf16 (a
compile-time hint on the fp32 IR, no calibration) and INT8 (NNCF post-training quantisation on the real
pairs of the gate) by the agreement gate, against the fp32 IR on the same pairs.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from headcut_grader.errors import UserError
from headcut.export.quantize import FFN_OUT
from headcut.export.runtimes import INSTALL_OPENVINO
from headcut_grader.backends import openvino_config
from headcut_grader.files import file_record
from headcut_grader.machine import bf16_native, cpu_info
from headcut_grader.optional import optional_module, why_unusable

IR_NAME = "openvino/model"  # .xml and .bin inside the grader folder
PRECISIONS = ("fp32", "bf16", "int8", "auto")


@dataclass(frozen=True)
class OvInt8Choice:
    """One NNCF recipe. `smooth_quant`: NNCF's SmoothQuant on MatMuls (its transformer default, alpha 0.95);
    `ignore_ffn_out`: leave every FFN down-projection in fp32 (their inputs carry the largest outliers)."""

    name: str
    smooth_quant: bool = True
    ignore_ffn_out: bool = False


# Each is judged and timed at export; none is assumed better. On the MiniLM Home Depot teacher (quick test
# teacher, 400-600 dev pairs) agreement with fp32 was 95-96% with SmoothQuant, 97-98% without it, 96-97% with
# the FFN down-projections left in fp32.
OV_INT8_CHOICES = (
    OvInt8Choice("nncf-transformer"),
    OvInt8Choice("nncf-no-smoothquant", smooth_quant=False),
    OvInt8Choice("nncf-ffn-out-fp32", ignore_ffn_out=True),
    OvInt8Choice("nncf-no-smoothquant-ffn-out-fp32", smooth_quant=False, ignore_ffn_out=True),
)


def require_openvino():
    """The openvino module, or one sentence saying why it cannot be used here (not installed, or its import fails)
    and what to install: the export's extra, which brings NNCF for INT8 too."""
    return required("openvino", "an OpenVINO export needs the openvino package")


def required(name: str, needs: str, *, about: tuple[str, ...] = ()):
    """The module `name` (openvino, nncf), or UserError (`about` those arguments): `needs` (what needs it), why it
    cannot be used here (not installed, or its import fails with the error said) and what to install."""
    why = why_unusable(name)
    if why:
        raise UserError(f"{needs}, which {why}; run: {INSTALL_OPENVINO}.", about=about)
    return optional_module(name)


def bf16_problem() -> str | None:
    """Why bf16 cannot be judged here, or None: only a CPU with AMX or AVX512_BF16 computes it natively."""
    if bf16_native():
        return None
    return (f"this CPU ({cpu_info().model}) has neither AMX nor AVX512_BF16, so bf16 would run emulated or as "
            "f32; export bf16 on the CPU that will serve it")


def convert(plain_onnx: str | Path):
    """The OpenVINO model of an unfused ONNX graph (dynamic batch and sequence kept)."""
    return require_openvino().convert_model(str(plain_onnx))


def save_ir(model, folder: Path) -> dict:
    """Write `model` as IR inside `folder` (weights kept fp32: the precision is the compile hint's or the
    quantiser's) and return grader.json's file records."""
    ov = require_openvino()
    xml = folder / f"{IR_NAME}.xml"
    xml.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(model, str(xml), compress_to_fp16=False)
    weights = xml.with_suffix(".bin")
    return {role: file_record(path, folder) for role, path in (("xml", xml), ("bin", weights))}


def compiled_runner(model, *, inference_precision: str, threads: int) -> Callable[[dict], np.ndarray]:
    """`run(batch) -> logits` with the same compile settings the runtime uses (headcut_grader.backends)."""
    ov = require_openvino()
    compiled = ov.Core().compile_model(model, "CPU", openvino_config(inference_precision, threads))
    names = [i.get_any_name() for i in compiled.inputs]
    request = compiled.create_infer_request()

    def run(batch: dict) -> np.ndarray:
        return request.infer({k: np.asarray(batch[k], dtype=np.int64) for k in names})[0].copy()

    return run


def quantize_int8(model, calibration: list[dict], choice: OvInt8Choice):
    """NNCF post-training INT8 of an OpenVINO model, calibrated on `calibration` batches (real pairs)."""
    nncf = required("nncf", "int8 on OpenVINO needs NNCF")
    rows = calibration_rows(model, calibration)
    advanced = nncf.AdvancedQuantizationParameters(
        smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=0.95 if choice.smooth_quant else -1))
    ignored = nncf.IgnoredScope(patterns=[f".*({FFN_OUT}).*"], validate=False) if choice.ignore_ffn_out else None
    with _quiet_nncf():
        return nncf.quantize(model, nncf.Dataset(rows), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(rows),
                             advanced_parameters=advanced,
            **({"ignored_scope": ignored} if ignored else {}))


@contextmanager
def _quiet_nncf():
    """NNCF and OpenVINO logging at ERROR (NNCF logs every step), and none of NNCF's progress bars ('Statistics
    collection ━━━'): it draws them on rich's global console whatever its log level, so that console is quiet
    meanwhile. Errors still raise, and ERROR records still reach the log."""
    import rich

    console = rich.get_console()
    loggers = [logging.getLogger(n) for n in ("nncf", "openvino")]
    levels, was_quiet = [q.level for q in loggers], console.quiet
    for q in loggers:
        q.setLevel(logging.ERROR)
    console.quiet = True
    try:
        yield
    finally:
        console.quiet = was_quiet
        for q, level in zip(loggers, levels):
            q.setLevel(level)


def calibration_rows(model, batches: list[dict]) -> list[dict]:
    """Each real pair of `batches` alone and unpadded: padding tokens would enter the activation ranges."""
    names = [i.get_any_name() for i in model.inputs]
    rows = []
    for batch in batches:
        mask = np.asarray(batch["attention_mask"])
        for j in range(len(mask)):
            n = int(mask[j].sum())
            rows.append({k: np.asarray(batch[k], dtype=np.int64)[j:j + 1, :n] for k in names})
    return rows
