"""Timing models on ONNX Runtime, fp32 or INT8, as the grader that will serve runs them: the runtime
`headcut prune --latency S --runtime onnx-int8` measures its layer cost tables on (prune/latency.py).

Each model is exported with `export_onnx`, quantised with the default INT8 recipe for `int8` (its fixed
scales calibrated on the timing input itself: timing does not need good scales), and timed
in an ORT session with the grader's session options; the sessions take turns in blocks (headcut.timing).
"""
from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

import numpy as np

from headcut.export.export import export_onnx, run_session, session
from headcut.export.quantize import quantize_int8
from headcut.timing import Runtime, round_robin


def onnx_runtime(*, int8: bool, threads: int) -> Runtime:
    """ONNX Runtime on the CPU with `threads` intra-op threads; INT8 graphs when `int8`."""
    import onnxruntime

    def timer(models: list, inputs: dict, seconds: float) -> list[float]:
        feed = {k: np.asarray(v, dtype=np.int64) for k, v in inputs.items()}
        with tempfile.TemporaryDirectory(prefix="headcut-layer-timer-") as tmp:
            sessions = []
            for i, model in enumerate(models):
                path = export_onnx(model, Path(tmp) / f"{i}.onnx")
                if int8:
                    path = quantize_int8(path, Path(tmp) / f"{i}-int8.onnx", calibration=[feed])
                sessions.append(session(path, threads=threads))
            runs = [lambda _, s=s: run_session(s, feed) for s in sessions]
            times = round_robin(runs, None, warmup=2, repeats=3, min_seconds=seconds)
        return [statistics.median(t) * 1000 for t in times]

    name = "onnx-int8" if int8 else "onnx-fp32"
    # the graph form is part of the version: cached tables timed on another form must not be reused
    form = "fused attention, static int8" if int8 else "fused attention"
    return Runtime(name, f"onnxruntime {onnxruntime.__version__}, {threads} threads, {form}", timer)
