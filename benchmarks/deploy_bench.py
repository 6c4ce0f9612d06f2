"""Deployment benchmark: the teacher in PyTorch (reference) next to pruned/distilled models and their ONNX
fp32 and INT8 graders, on Home Depot dev, in one run with the same threads; optionally a server load test.

    .venv/bin/python benchmarks/deploy_bench.py [--teacher runs/teacher] [--model runs/pruned ...]
        [--out runs/deploy_bench] [--limit 1000] [--threads 2] [--small-grid] [--serve]

Graders are exported into OUT/graders (reused when present): fp32 and INT8 (the gated recipe) for every
model, plus the default-recipe INT8 of the teacher for comparison. Without --model, a pruned stand-in with
uneven heads and a 0-head layer is made with headcut.arch.keep_heads (parity figures, not quality);
--standin adds it next to the given models.
Writes OUT/bench.{json,md,png}; --serve adds a loopback load test at concurrency 8 to bench.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"
STANDIN_KEEP = [list(range(12)), [0, 2, 4, 6, 8, 10], [], list(range(9)), [1, 5, 7], list(range(10))]


def variant_name(path: Path, taken) -> str:
    """A short name for a model folder that no other variant has: its own name, or with its parents'
    (a `headcut run` keeps every model in a folder called `model`, under the stage's folder)."""
    parts = path.resolve().parts
    for k in range(1, len(parts) + 1):
        name = "-".join(p for p in parts[-k:] if p != "model")
        if name and name not in taken and name != "teacher":
            return name
    raise SystemExit(f"--model {path} is given twice")


def build(loaded, out: Path, pairs, *, int8: bool, default_only: bool = False, threads: int):
    from headcut.export import CHOICES, Int8Gate, build_grader

    if (out / "grader.json").exists():
        return json.loads((out / "grader.json").read_text())
    kwargs = {}
    if default_only:  # the yardstick: ORT's default dynamic INT8, whatever its agreement
        kwargs = {"choices": (CHOICES[0],), "gate": Int8Gate(0.0, 1.0, 100.0, 0.0)}
    return build_grader(loaded, out, pairs=pairs, int8=int8, threads=threads, **kwargs)


def serve_load_test(grader: Path, pairs, *, requests: int, concurrency: int, workers: int) -> dict:
    from headcut.export.bench import load_test, running_server

    bodies = [{"pairs": [{"query": pairs.queries[(8 * i + j) % len(pairs)], "title": pairs.titles[(8 * i + j) % len(pairs)]}
                         for j in range(8)]} for i in range(requests)]
    try:
        with running_server(grader, workers=workers, threads=1, cwd=ROOT) as url:
            load_test(url, bodies[:concurrency], concurrency=concurrency)  # warm-up
            result = load_test(url, bodies, concurrency=concurrency)
    except RuntimeError as e:
        raise SystemExit(str(e)) from None
    result.update({"workers": workers, "pairs_per_request": 8, "grader": str(grader)})
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", default="runs/teacher")
    parser.add_argument("--model", action="append", default=[], help="pruned/distilled artifact (repeatable)")
    parser.add_argument("--data", default=str(DEV))
    parser.add_argument("--out", default="runs/deploy_bench")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--small-grid", action="store_true", help="batch {1,32} x sequence {64} only")
    parser.add_argument("--standin", action="store_true",
                        help="add the uneven-heads stand-in (with a 0-head layer) even when --model is given")
    parser.add_argument("--serve", action="store_true", help="also load-test `headcut serve` on loopback")
    parser.add_argument("--serve-requests", type=int, default=200)
    args = parser.parse_args()

    from headcut.arch import keep_heads
    from headcut.cli.common import quiet_transformers
    from headcut.data import read_pairs
    from headcut.export import ParityError
    from headcut.export.bench import BenchSettings, benchmark, load_measured, onnx_variant, pytorch_variant, write_bench
    from headcut.models import load_model, save_model

    quiet_transformers()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pairs = read_pairs(args.data, preset="homedepot").sample(args.limit, seed=0)
    teacher = load_model(args.teacher)
    models = {"teacher": teacher}
    for path in args.model:
        models[variant_name(Path(path), models)] = load_model(path)
    if args.standin or not args.model:
        standin = out / "pruned-standin"
        if not (standin / "headcut.json").exists():
            copy = load_model(args.teacher)
            keep_heads(copy.model, STANDIN_KEEP)
            save_model(copy, standin, meta={"kind": "pruned-standin", "keep": STANDIN_KEEP}, overwrite=True)
        models["pruned-standin"] = load_model(standin)

    graders, exports, refused = {}, {}, {}
    for name, loaded in models.items():
        for precision in ("fp32", "int8"):
            folder = out / "graders" / f"{name}-{precision}"
            print(f"export {folder.name}", file=sys.stderr)
            try:
                exports[folder.name] = build(loaded, folder, pairs, int8=precision == "int8", threads=args.threads)
            except ParityError as e:  # a gate said no: report it, bench the rest
                refused[folder.name] = str(e)
                continue
            graders[folder.name] = folder
    folder = out / "graders" / "teacher-int8-default"
    exports[folder.name] = build(teacher, folder, pairs, int8=True, default_only=True, threads=args.threads)
    graders[folder.name] = folder

    settings = BenchSettings((1, 32) if args.small_grid else (1, 8, 32), (64,) if args.small_grid else (32, 64, 128),
                             args.threads, repeats=args.repeats)
    variants = [load_measured(lambda n=n, lm=lm: pytorch_variant(f"pytorch fp32 {n}", lm, threads=args.threads))
                for n, lm in models.items()]
    variants += [load_measured(lambda n=n, f=f: onnx_variant(f"onnx {n}", f, threads=args.threads))
                 for n, f in graders.items()]
    result = benchmark(variants, teacher.tokenizer, pairs, settings, progress=lambda m: print(m, file=sys.stderr))
    result.extra["exports"] = {n: {"parity": r["parity"], "int8": (r.get("int8") or {}).get("chosen"),
                                   "int8_trials": (r.get("int8") or {}).get("trials"),
                                   "heads": r["source"]["heads_per_layer"]} for n, r in exports.items()}
    result.extra["refused"] = refused
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from machine import describe, machine

    result.extra["machine"] = describe(machine())  # speed ratios move between CPUs: say which one
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    notes = f"\nMachine: {result.extra['machine']}; load average after: {load}.\n"
    if args.serve:
        print("load test", file=sys.stderr)
        s = result.extra["server"] = serve_load_test(graders["teacher-int8"], pairs, requests=args.serve_requests,
                                                     concurrency=8, workers=max(1, min(2, os.cpu_count() or 1)))
        notes += (f"\nServer ({s['workers']} workers, {s['pairs_per_request']} pairs/request, concurrency "
                 f"{s['concurrency']}): {s['requests_per_s']:.1f} requests/s, {s['pairs_per_s']:.0f} pairs/s, "
                 f"p50 {s['p50_ms']:.0f} ms, p95 {s['p95_ms']:.0f} ms, errors {s['errors']}/{s['requests']}\n")
    print(write_bench(result, out, notes=notes))


if __name__ == "__main__":
    main()
