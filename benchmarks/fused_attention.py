"""Attention exported fused (one ORT MultiHeadAttention op per layer, headcut/export/fuse.py) against traced
op by op, for one model, fp32 and default INT8, side by side in turns; plus where the INT8 graphs spend their
time by ONNX op type (ORT's profiler), which is what showed the traced attention's cost.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fused_attention.py --model runs/homedepot/prune/model
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from headcut_grader.backend_choice import TIMING_SHAPE
from headcut.export.bench_settings import BenchSettings  # its threads: the toolkit's default
from bench_flags import whole
from headcut_grader.ranges import BATCH, REPEATS, SEQ_LEN, THREADS

ROOT = Path(__file__).resolve().parents[1]
ATTENTION_OPS = {"MultiHeadAttention", "Softmax", "Where", "IsNaN", "Transpose", "FusedMatMul", "MatMul"}


def op_shares(path: Path, feed: dict, threads: int, runs: int = 5) -> dict[str, float]:
    """Share of kernel time per ONNX op type over `runs` profiled runs."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.enable_profiling = True
    opts.profile_file_prefix = str(path.with_suffix(""))
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(runs):
        sess.run(None, feed)
    events = json.loads(Path(sess.end_profiling()).read_text())
    by_op = collections.Counter()
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_op[e["args"]["op_name"]] += e["dur"]
    total = sum(by_op.values()) or 1
    return {op: t / total for op, t in by_op.most_common()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    # the shape export's speed choices are timed at
    parser.add_argument("--batch", type=whole(BATCH), default=TIMING_SHAPE[0])
    parser.add_argument("--seq-len", type=whole(SEQ_LEN), default=TIMING_SHAPE[1])
    parser.add_argument("--threads", type=whole(THREADS), default=BenchSettings.threads)
    parser.add_argument("--rounds", type=whole(REPEATS), default=5)
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from headcut.export.export import export_onnx, run_session, session
    from headcut.export.quantize import quantize_int8
    from headcut.models import load_model
    from headcut.timing import round_robin
    from machine import describe, machine

    model = load_model(args.model).model
    rng = np.random.default_rng(0)
    shape = (args.batch, args.seq_len)
    mask = np.ones(shape, dtype=np.int64)
    mask[::2, args.seq_len // 2:] = 0  # half the rows padded: the fused op must honour the mask
    feed = {"input_ids": rng.integers(1000, 5000, shape) * mask, "attention_mask": mask,
            "token_type_ids": np.zeros(shape, dtype=np.int64)}
    with tempfile.TemporaryDirectory(prefix="headcut-fused-") as tmp:
        paths = {}
        for fused in (False, True):
            name = "fused" if fused else "traced"
            paths[f"{name} fp32"] = export_onnx(model, Path(tmp) / f"{name}.onnx", fuse=fused)
            paths[f"{name} int8"] = quantize_int8(paths[f"{name} fp32"], Path(tmp) / f"{name}-int8.onnx",
                                                 calibration=[feed])
        sessions = {k: session(p, threads=args.threads) for k, p in paths.items()}
        logits = {k: run_session(s, feed) for k, s in sessions.items()}
        times = round_robin([lambda b, s=s: run_session(s, b) for s in sessions.values()], feed, repeats=args.rounds)
        ms = {k: 1000 * statistics.median(t) for k, t in zip(sessions, times)}
        shares = {k: op_shares(Path(paths[k]), {n: feed[n] for n in (i.name for i in sessions[k].get_inputs())},
                               args.threads) for k in ("traced int8", "fused int8")}
    print(f"{describe(machine())}; load average {os.getloadavg()[0]:.2f}; {args.model}, "
          f"batch {args.batch} x {args.seq_len}")
    print(f"fp32 fused vs traced: max |logit diff| {np.abs(logits['fused fp32'] - logits['traced fp32']).max():.2e}")
    for precision in ("fp32", "int8"):
        traced, fused = ms[f"traced {precision}"], ms[f"fused {precision}"]
        print(f"{precision}: traced {traced:.1f} ms, fused {fused:.1f} ms per batch ({traced / fused:.2f}x)")
    for k, share in shares.items():
        attention = sum(v for op, v in share.items() if op in ATTENTION_OPS)
        top = ", ".join(f"{op} {v:.0%}" for op, v in list(share.items())[:6])
        print(f"{k}: attention-side ops {attention:.0%} of kernel time (top: {top})")


if __name__ == "__main__":
    main()
