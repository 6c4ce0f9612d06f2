"""ONNX graders: parity-gated export, INT8 choice, safe graph optimisation, grader folders, benchmark.

The deployable runtime is `headcut_grader` (no torch); this package needs torch. Its names load on first
use, so reading a setting's declaration (headcut.export.gate) does not import torch."""
import importlib

_HOME = {"build_grader": "build", "choose_export": "build", "ExportChoice": "build", "Int8Gate": "gate",
         "optimize_graph": "optimize", "CHOICES": "quantize",
         "Int8Choice": "quantize", "quantize_int8": "quantize",
         **dict.fromkeys(["FP32_TOLERANCE", "GateError", "Parity", "ParityError", "check_parity", "export_onnx",
                          "parity"], "export")}
__all__ = list(_HOME)


def __getattr__(name):
    if name not in _HOME:
        raise AttributeError(f"module 'headcut.export' has no attribute {name!r}")
    return getattr(importlib.import_module(f"headcut.export.{_HOME[name]}"), name)
