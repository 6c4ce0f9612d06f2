"""ONNX graders: parity-gated export, INT8 choice, safe graph optimisation, grader folders, benchmark.

The deployable runtime lives in `headcut.grader` (no torch); this package needs torch.
"""
from headcut.export.build import build_grader
from headcut.export.export import FP32_TOLERANCE, GateError, Parity, ParityError, check_parity, export_onnx, parity
from headcut.export.optimize import optimize_graph
from headcut.export.quantize import CHOICES, Int8Choice, Int8Gate, quantize_int8

__all__ = ["build_grader", "FP32_TOLERANCE", "GateError", "Parity", "ParityError", "check_parity", "export_onnx", "parity",
           "optimize_graph", "CHOICES", "Int8Choice", "Int8Gate", "quantize_int8"]
