"""Deployment benchmark: the teacher in PyTorch (reference) next to pruned/distilled models and their graders on
ONNX Runtime (fp32, INT8) and OpenVINO (fp32, bf16 where the CPU has AMX or AVX512_BF16, NNCF INT8), on Home
Depot dev, in one run with the same threads; optionally a server load test.

    .venv/bin/python benchmarks/deploy_bench.py [--teacher runs/teacher] [--model runs/pruned ...]
        [--out runs/deploy_bench] [--limit 1000] [--threads 2] [--small-grid] [--serve]

Graders are exported into OUT/graders (reused when present): ONNX Runtime fp32 and INT8 (the gated recipe) and
OpenVINO fp32, bf16 and INT8 (each through its gate; --no-openvino leaves them out) for every model, plus the
default-recipe ONNX Runtime INT8 of the teacher for comparison. Every row carries achieved GFLOP/s beside the
machine's peak at its precision, and the table names the CPU and runtime versions. Without --model, a pruned stand-in
with uneven heads and a 0-head layer is made with headcut.arch.keep_heads (parity figures, not quality);
--standin adds it next to the given models.
Writes OUT/bench.{json,md,png}; --serve adds a loopback load test at concurrency 8 to bench.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from headcut.export.bench_settings import BenchSettings  # its threads: the toolkit's default
from bench_flags import file_to_read, out_dir, whole
from headcut_grader.ranges import REPEATS, THREADS

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


# (folder suffix, backend, precision): every grader made of each model
GRADERS = (("fp32", "onnxruntime", "fp32"), ("int8", "onnxruntime", "int8"), ("ov-fp32", "openvino", "fp32"),
           ("ov-bf16", "openvino", "bf16"), ("ov-int8", "openvino", "int8"))


def build(loaded, out: Path, pairs, *, backend: str = "onnxruntime", precision: str, default_only: bool = False,
          threads: int):
    from headcut.export import CHOICES, Int8Gate, build_grader

    if (out / "grader.json").exists():
        return json.loads((out / "grader.json").read_text())
    kwargs = {}
    if default_only:  # the yardstick: ORT's default dynamic INT8, whatever its agreement
        kwargs = {"choices": (CHOICES[0],), "gate": Int8Gate(0.0, 1.0, 100.0, 0.0)}
    return build_grader(loaded, out, pairs=pairs, backend=backend, precision=precision, threads=threads, **kwargs)


def within_floor(rows: list[dict], *, points: float = 1.0, spearman: float = 0.01) -> dict | None:
    """The fastest row within `points` of accuracy and `spearman` of the reference (the first row)."""
    ref = rows[0]
    fits = [r for r in rows[1:] if r.get("accuracy") is not None and ref["accuracy"] - r["accuracy"] <= points / 100
            and ref["spearman"] - r["spearman"] <= spearman]
    return max(fits, key=lambda r: headline(r)["speedup"], default=None)


def headline(row: dict) -> dict:
    """The batch 32 x sequence 64 cell (both grids have it)."""
    return next(c for c in row["cells"] if (c["batch"], c["seq"]) == (32, 64))


def serve_load_test(grader: Path, pairs, *, requests: int, concurrency: int, workers: int) -> dict:
    from headcut.export.server_load import load_test, running_server

    bodies = [{"pairs": [{"query": pairs.queries[(8 * i + j) % len(pairs)],
                          "title": pairs.titles[(8 * i + j) % len(pairs)]}
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
    parser.add_argument("--data", type=file_to_read(), default=str(DEV))
    parser.add_argument("--out", default="runs/deploy_bench")
    parser.add_argument("--limit", type=whole(), default=1000)
    parser.add_argument("--threads", type=whole(THREADS), default=BenchSettings.threads)
    parser.add_argument("--repeats", type=whole(REPEATS), default=10)
    parser.add_argument("--small-grid", action="store_true", help="batch {1,32} x sequence {64} only")
    parser.add_argument("--standin", action="store_true",
                        help="add the uneven-heads stand-in (with a 0-head layer) even when --model is given")
    parser.add_argument("--serve", action="store_true", help="also load-test `headcut serve` on loopback")
    parser.add_argument("--no-openvino", action="store_true", help="ONNX Runtime graders only")
    parser.add_argument("--serve-requests", type=whole(), default=200)
    args = parser.parse_args()
    out_dir(parser, args.out, inputs=[args.teacher, *args.model])

    from headcut.arch import keep_heads
    from headcut.cli.common import quiet_transformers
    from headcut_grader.data import read_pairs
    from headcut.arch import flops_per_pair
    from headcut_grader.errors import UserError
    from headcut.export.bench import benchmark, grader_variant, load_measured, pytorch_variant
    from headcut.export.bench_report import write_bench
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
        for suffix, backend, precision in GRADERS:
            if backend == "openvino" and args.no_openvino:
                continue
            folder = out / "graders" / f"{name}-{suffix}"
            print(f"export {folder.name}", file=sys.stderr)
            try:
                exports[folder.name] = build(loaded, folder, pairs, backend=backend, precision=precision,
                                             threads=args.threads)
            except UserError as e:  # a gate said no, or the CPU has no bf16: report it, bench the rest
                refused[folder.name] = str(e)
                continue
            graders[folder.name] = (folder, backend, name)
    folder = out / "graders" / "teacher-int8-default"
    exports[folder.name] = build(teacher, folder, pairs, precision="int8", default_only=True, threads=args.threads)
    graders[folder.name] = (folder, "onnxruntime", "teacher")

    settings = BenchSettings((1, 32) if args.small_grid else (1, 8, 32), (64,) if args.small_grid else (32, 64, 128),
                             args.threads, repeats=args.repeats)
    variants = [load_measured(lambda n=n, lm=lm: pytorch_variant(f"pytorch fp32 {n}", lm, threads=args.threads))
                for n, lm in models.items()]
    flops = {n: (lambda seq, m=lm.model: flops_per_pair(m, seq)) for n, lm in models.items()}
    variants += [load_measured(lambda n=n, f=f, b=b, m=m: grader_variant(n, f, threads=args.threads, backend=b,
                                                                         flops=flops[m]))
                 for n, (f, b, m) in graders.items()]
    result = benchmark(variants, teacher.tokenizer, pairs, settings, progress=lambda m: print(m, file=sys.stderr))
    result.extra["exports"] = {n: {"parity": r["parity"], "int8": (r.get("int8") or {}).get("chosen"),
                                   "int8_trials": (r.get("int8") or {}).get("trials"),
                                   "heads": r["source"]["heads_per_layer"]} for n, r in exports.items()}
    result.extra["refused"] = refused
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    notes = f"\nLoad average after: {load}.\n"
    best = within_floor(result.variants)
    if best:
        notes += (f"\nFastest within 1 point of accuracy and 0.01 Spearman of the PyTorch teacher: {best['name']}, "
                  f"{headline(best)['speedup']:.2f}x at batch 32 x 64.\n")
    notes += "".join(f"\nNot benched: {name}: {why}\n" for name, why in refused.items())
    if args.serve:
        print("load test", file=sys.stderr)
        s = result.extra["server"] = serve_load_test(graders["teacher-int8"][0], pairs, requests=args.serve_requests,
                                                     concurrency=8, workers=max(1, min(2, os.cpu_count() or 1)))
        notes += (f"\nServer ({s['workers']} workers, {s['pairs_per_request']} pairs/request, concurrency "
                 f"{s['concurrency']}): {s['requests_per_s']:.1f} requests/s, {s['pairs_per_s']:.0f} pairs/s, "
                 f"p50 {s['p50_ms']:.0f} ms, p95 {s['p95_ms']:.0f} ms, errors {s['errors']}/{s['requests']}\n")
    print(write_bench(result, out, notes=notes))


if __name__ == "__main__":
    main()
