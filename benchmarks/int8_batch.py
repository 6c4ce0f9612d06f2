"""INT8 recipes side by side on one model: agreement with the fp32 graph, how many grades move between a pair
graded alone and inside shuffled batches (per-batch activation scales make grades depend on the neighbours),
and speed against fp32, every graph timed in turns (headcut.timing) on the export's timing batch. ORT's
dynamic quantisation, which headcut no longer ships, is measured beside the shipped recipes for comparison.

    PYTHONPATH=$PWD:$PWD/grader .venv/bin/python benchmarks/int8_batch.py \
        --model .cache/tests/quick-teacher-* --data ../shared/data/homedepot/dev.tsv --rows 600
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
from pathlib import Path
from headcut.export.bench_settings import BenchSettings  # its threads: the toolkit's default
from headcut_grader.ranges import BATCH, THREADS

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script runs, also where a test loads it
from bench_flags import file_to_read, whole  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def graphs(model, fp32: Path, folder: Path, calibration: list[dict]) -> dict[str, Path]:
    """The fp32 graph, ORT's dynamic INT8 (per channel) and every shipped recipe, resolved as the export does."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from headcut.export.quantize import CHOICES, quantize_int8, resolve

    found = {"fp32": fp32, "dynamic per-channel (not shipped)": folder / "dynamic.onnx"}
    quantize_dynamic(str(fp32), str(found["dynamic per-channel (not shipped)"]), weight_type=QuantType.QInt8,
                     per_channel=True)
    for choice in (resolve(c, model, calibration) for c in CHOICES):
        found[choice.name] = quantize_int8(fp32, folder / f"{choice.name}.onnx", calibration=calibration,
                                           choice=choice)
    return found


def parse_args(argv=None) -> argparse.Namespace:
    from headcut.export.quantize import batch_dependence

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", type=file_to_read(), required=True, help="labelled pairs (Home Depot TSV)")
    parser.add_argument("--rows", type=whole(), default=600)
    parser.add_argument("--threads", type=whole(THREADS), default=BenchSettings.threads)
    parser.add_argument("--batch-size", type=whole(BATCH), help="pairs per shuffled batch the grades are compared in "
                        "(default %(default)s: batch_dependence's, what the export measures)",
                        default=inspect.signature(batch_dependence).parameters["batch_size"].default)
    return parser.parse_args(argv)


def main():
    args = parse_args()
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from machine import describe, machine

    from headcut.batching import encode
    from headcut_grader.data import read_pairs
    from headcut.evaluate.metrics import agreement
    from headcut.export.export import export_onnx, gate_batches, onnx_logits, run_session, session
    from headcut.export.quantize import batch_dependence
    from headcut.models import load_model
    from headcut.timing import round_robin
    from headcut_grader.backend_choice import timing_batch

    loaded = load_model(args.model)
    pairs = read_pairs(args.data, preset="homedepot").sample(args.rows, seed=0)
    encoded = encode(loaded.tokenizer, pairs, max_length=64, model=loaded.model)
    calibration = gate_batches(loaded.model, loaded.tokenizer, pairs, max_length=64)[:8]
    print(f"{describe(machine())}; load average {os.getloadavg()[0]:.2f}; {args.model}, {len(pairs)} pairs")
    with tempfile.TemporaryDirectory(prefix="headcut-int8-batch-") as tmp:
        fp32 = export_onnx(loaded.model, Path(tmp) / "fp32.onnx")
        sessions = {name: session(path, threads=args.threads) for name, path in
                    graphs(loaded.model, fp32, Path(tmp), calibration).items()}
        reference = onnx_logits(sessions["fp32"], encoded, model=loaded.model)
        times = round_robin([lambda b, s=s: run_session(s, b) for s in sessions.values()],
                            timing_batch(loaded.model.config.vocab_size), repeats=10)
        seconds = dict(zip(sessions, (statistics.median(t) for t in times)))
        print("| graph | agreement with fp32 | grades moved alone vs batch | max Δ expected grade | speed vs fp32 |")
        print("|---|---|---|---|---|")
        for name, sess in sessions.items():
            # model=: batches cut as export cuts them (an eager-attention model's by its attention scores' size)
            changes, drift = batch_dependence(sess, encoded, pairs.grades, rows=len(encoded),
                                              batch_size=args.batch_size, model=loaded.model)
            logits = onnx_logits(sess, encoded, model=loaded.model)
            print(f"| {name} | {agreement(logits, reference):.2%} | {changes} of {len(encoded)} "
                  f"| {drift:.3f} | x{seconds['fp32'] / seconds[name]:.2f} |")


if __name__ == "__main__":
    main()
