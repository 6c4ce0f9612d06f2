"""The grader over a Ray Data dataset on a local Ray instance: throughput with N actors, and the grades checked
against the plain Grader. Needs `pip install 'headcut-grader[ray]'` (any venv: no torch needed).

    python benchmarks/grade_ray.py GRADER_DIR [--rows 20000] [--concurrency 2] [--threads 1] [--out FILE.json]

The pairs are Home Depot train pairs repeated to --rows, written as a CSV that Ray Data reads.
"""
from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

from bench_flags import out_file, whole
from headcut_grader.files import atomic_file, write_text
from headcut_grader.ranges import THREADS

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT.parent / "shared" / "data" / "homedepot" / "train.tsv"


def main() -> None:
    import numpy as np
    import ray

    from headcut_grader import Grader
    from headcut_grader.ray_data import grade_dataset

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grader")
    parser.add_argument("--rows", type=whole(), default=20_000)
    parser.add_argument("--concurrency", type=whole(), default=2)
    parser.add_argument("--threads", type=whole(THREADS), default=1)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.out:  # before Ray starts: a place it cannot write was a traceback after the whole run
        args.out = out_file(parser, args.out, inputs=[args.grader])

    with open(TRAIN, encoding="utf-8", newline="") as f:
        rows = [(r["query"], r["title"]) for r in csv.DictReader(f, delimiter="\t")]
    rows = [rows[i % len(rows)] for i in range(args.rows)]
    # a folder of this run's own: was /tmp/grade_ray_ROWS.csv, which a run beside it rewrote while Ray read it
    with tempfile.TemporaryDirectory(prefix="headcut-grade-ray-") as folder:
        source = Path(folder) / "pairs.csv"
        with atomic_file(source, binary=False) as f:
            writer = csv.writer(f)
            writer.writerow(["query", "title"])
            writer.writerows(rows)
        # one CPU more than the actors reserve: Ray Data needs one for the read tasks, or they wait for ever
        ray.init(num_cpus=args.concurrency * args.threads + 1, include_dashboard=False)
        start = time.perf_counter()
        graded = grade_dataset(ray.data.read_csv(str(source)), args.grader, concurrency=args.concurrency,
                               threads=args.threads).to_pandas()
        seconds = time.perf_counter() - start
        ray.shutdown()
    sample = graded.sample(min(2000, len(graded)), random_state=0)
    expected = Grader(args.grader, threads=args.threads).grade(list(zip(sample["query"], sample["title"])))
    result = {"rows": len(graded), "concurrency": args.concurrency, "threads": args.threads,
              "seconds": round(seconds, 1), "pairs_per_s": round(len(graded) / seconds),
              "sample_grades_equal": bool(np.array_equal(sample["grade"].to_numpy(), expected.grades)),
              "sample_max_expected_diff": float(np.abs(sample["expected_grade"].to_numpy() - expected.expected).max())}
    print(json.dumps(result))
    if args.out:
        write_text(args.out, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
