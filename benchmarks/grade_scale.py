"""`headcut-grader grade` at scale: pairs/s and peak memory (all its processes together) for input sizes and
worker layouts, on Home Depot train pairs repeated to the size asked.

    .venv/bin/python benchmarks/grade_scale.py GRADER_DIR [--rows 100000,1000000] [--layouts 1x2,2x1]
        [--rounds 1] [--out runs/grade_scale]

A layout WxT is W worker processes of T ONNX Runtime threads each. With --rounds N the layouts take turns N
times per size, the first one rotating, and each round's pairs/s ratio to the first layout is printed: on a
shared machine only runs taken side by side compare. Writes OUT/grade_scale.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_flags import joined, out_dir, several, whole
from headcut_grader.files import atomic_file, write_text
from headcut_grader.ranges import REPEATS, declared_range
from headcut_grader.grade_file import GradeSettings

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT.parent / "shared" / "data" / "homedepot" / "train.tsv"


def pairs_file(rows: int, folder: Path) -> Path:
    path = folder / f"pairs{rows}.tsv"
    if not path.exists():
        header, *lines = TRAIN.read_text(encoding="utf-8").splitlines(keepends=True)
        with atomic_file(path, binary=False) as f:  # its own temporary: a run beside it writes the same file
            f.write(header)
            f.writelines(lines[i % len(lines)] for i in range(rows))
    return path


def run(grader: Path, source: Path, out: Path, workers: int, threads: int, backend: str) -> dict:
    """Wall time and the peak of the summed RSS of the command and its worker processes (sampled every 0.1 s)."""
    import psutil

    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "headcut_grader", "grade", str(grader), str(source), "--out",
                             str(out), "--overwrite", "--workers", str(workers), "--threads", str(threads),
                             "--backend", backend],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "TQDM_DISABLE": "1"})
    top, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, sum(p.memory_info().rss for p in [top, *top.children(recursive=True)]))
        except psutil.Error:
            pass
        time.sleep(0.1)
    seconds = time.perf_counter() - start
    assert proc.returncode == 0, proc.stdout.read()
    return {"seconds": round(seconds, 1), "peak_rss_mib": round(peak / 2**20)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grader")
    parser.add_argument("--rows", type=several(whole()), default="100000,1000000")
    layout = joined("WxT", whole(declared_range(GradeSettings, "workers")),
                    whole(declared_range(GradeSettings, "threads")), example="2x1")
    parser.add_argument("--layouts", default="1x2,2x1", help="WxT: W workers of T threads (grade's --workers, "
                        "--threads)", type=several(layout))
    parser.add_argument("--rounds", type=whole(REPEATS), default=1,
                        help="turns of every layout per size (first one rotating)")
    parser.add_argument("--out", default=ROOT / "runs" / "grade_scale")
    parser.add_argument("--backend", default="auto", help="onnxruntime, openvino or auto (headcut grade --backend)")
    args = parser.parse_args()
    args.out = out_dir(parser, args.out, inputs=[args.grader])
    args.out.mkdir(parents=True, exist_ok=True)
    layouts = args.layouts
    results, ratios = [], []
    for rows in args.rows:
        source = pairs_file(rows, args.out)
        for round_ in range(args.rounds):
            turn = layouts[round_ % len(layouts):] + layouts[:round_ % len(layouts)]
            speed = {}
            for workers, threads in turn:
                result = {"rows": rows, "round": round_, "workers": workers, "threads": threads,
                          **run(args.grader, source, args.out / "grades.tsv", workers, threads, args.backend)}
                result["pairs_per_s"] = round(rows / result["seconds"])
                speed[workers, threads] = result["pairs_per_s"]
                results.append(result)
                print(json.dumps(result), flush=True)
            ratios.append({"rows": rows, "round": round_, "first": "x".join(map(str, turn[0])),
                           **{f"{w}x{t} / {layouts[0][0]}x{layouts[0][1]}": round(v / speed[layouts[0]], 3)
                              for (w, t), v in speed.items() if (w, t) != layouts[0]}})
    write_text(args.out / "grade_scale.json", json.dumps({"runs": results, "ratios": ratios}, indent=2) + "\n")
    lines = ["| rows | round | workers x threads | seconds | pairs/s | peak RSS (all processes) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['rows']:,} | {r['round']} | {r['workers']} x {r['threads']} | {r['seconds']} | "
              f"{r['pairs_per_s']:,} | {r['peak_rss_mib']} MiB |" for r in results]
    lines += ["", "Ratios within each round (the layouts ran side by side):", ""]
    lines += [json.dumps(r) for r in ratios]
    write_text(args.out / "grade_scale.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
