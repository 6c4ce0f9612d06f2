"""Peak resident memory of real headcut processes, and the import time of the two packages.

    PYTHONPATH=$PWD:$PWD/grader .venv/bin/python benchmarks/memory.py [--model runs/teacher] [--grader GRADER_DIR]
        [--rows 1000] [--requests 20] [--probe-pairs 32] [--probe-length 256] [--repeats 5] [--out runs/memory]
        [--quick]

Each figure is one process's own peak RSS (VmHWM, the kernel's high-water mark since the process started its
program, read from /proc; workers are reported apart, never summed into the master):
  - `headcut serve GRADER` with 1 worker, and the master of `--workers 2`: started on a free loopback port, sent
    --requests requests of 8 Home Depot dev pairs, then VmHWM and VmRSS read while it still serves, then stopped;
  - the master of `headcut-grader grade GRADER PAIRS --workers 2` on --rows dev pairs, and
  - `headcut probe --model MODEL` on --probe-pairs pairs whose titles run past --probe-length tokens (the probe
    holds attention maps, the most memory-hungry scoring pass),
the last two read at their exit (the command runs under a launcher that records /proc/self/status at exit).
Import time is the cumulative time `python -X importtime` reports for `import headcut` and `import
headcut_grader` (both load their modules on first use) and for their CLIs (`headcut.cli.main`,
`headcut_grader.cli.main`: what a command imports before it starts) in a fresh interpreter, the least of
--repeats runs.

Without --grader, MODEL is exported (fp32 ONNX, `headcut export`) to OUT/grader once and reused. MODEL is
runs/teacher where it exists, else the untuned MiniLM (memory does not depend on what the weights learned).
--quick (a few requests, 200 rows, 8 probe pairs of 128 tokens, one import run) checks that everything runs.
Prints the machine (CPU model, SIMD flags, runtime versions) and the load average before and after.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from machine import describe
from bench_flags import out_dir, whole
from headcut_grader.files import write_text
from headcut_grader.ranges import REPEATS, SEQ_LEN

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"
WORDS = ("Ridgeline 20-volt cordless drill in black", "HomeMax 36 in. brushed nickel pull-down kitchen faucet",
         "Everbuild 5 gal. semi-gloss exterior paint in white", "Northwind 60 ft. expandable garden hose")
# runs a module as `python -m` does, and at exit writes its own VmHWM / VmRSS lines to the file named first
LAUNCHER = """import atexit, runpy, sys
report, module = sys.argv[1], sys.argv[2]
def record():
    with open("/proc/self/status") as f:
        lines = "".join(line for line in f if line.startswith(("VmHWM", "VmRSS")))
    from headcut_grader.files import write_text  # after the reading, so its import is not in the peak
    write_text(report, lines)
atexit.register(record)
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


def memory_of(pid: int | str) -> dict:
    """{'VmHWM': MiB, 'VmRSS': MiB} of a live process (pid) or of a file holding /proc status lines."""
    path = Path(f"/proc/{pid}/status") if isinstance(pid, int) else Path(pid)
    fields = dict(line.split(":", 1) for line in path.read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmHWM", "VmRSS")}  # kB in /proc


def children_of(pid: int) -> list[int]:
    found = []
    for listing in Path(f"/proc/{pid}/task").glob("*/children"):
        found += [int(child) for child in listing.read_text().split()]
    return found


def dev_rows(count: int) -> list[tuple[str, str]]:
    header, *lines = DEV.read_text(encoding="utf-8").splitlines()
    columns = header.split("\t")
    q, t = columns.index("query"), columns.index("title")
    rows = [(cells[q], cells[t]) for cells in (line.split("\t") for line in lines[:count])]
    return (rows * (count // len(rows) + 1))[:count]


def write_pairs(path: Path, rows: list[tuple[str, str]]) -> Path:
    write_text(path, "query\ttitle\n" + "".join(f"{q}\t{t}\n" for q, t in rows))
    return path


def launched(report: Path, module: str, *args: str) -> dict:
    """Run `python -m MODULE ARGS` to its end; its own VmHWM / VmRSS at exit (MiB) and seconds."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(report), module, *args], capture_output=True,
                          text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    if done.returncode:
        sys.exit(f"python -m {module} {' '.join(args)} failed ({done.returncode}): {done.stderr[-1500:]}")
    return {**memory_of(str(report)), "seconds": time.perf_counter() - start}


def served(grader: Path, workers: int, requests: int) -> dict:
    """VmHWM / VmRSS (MiB) of the `headcut serve` master after `requests` requests of 8 pairs, and its workers'."""
    from headcut.export.server_load import load_test, running_server

    pairs = dev_rows(8 * requests)
    bodies = [{"pairs": [{"query": q, "title": t} for q, t in pairs[i * 8:(i + 1) * 8]]} for i in range(requests)]
    start = time.perf_counter()
    with running_server(grader, workers=workers, threads=1) as url:
        answered = load_test(url, bodies, concurrency=4)
        if answered["errors"]:
            sys.exit(f"headcut serve --workers {workers}: {answered['errors']} of {requests} requests failed")
        master = next(pid for pid in children_of(os.getpid()) if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes())
        workers_hwm = [memory_of(pid)["VmHWM"] for pid in children_of(master)
                       if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        return {**memory_of(master), "seconds": time.perf_counter() - start, "workers_hwm": workers_hwm}


def import_ms(module: str, repeats: int) -> float:
    """Least cumulative `-X importtime` of `import MODULE` in a fresh interpreter, in ms."""
    best = float("inf")
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True,
                              text=True, check=True)
        line = next(line for line in done.stderr.splitlines() if line.rsplit("|", 1)[-1].strip() == module)
        best = min(best, int(line.split("|")[1]) / 1000)  # "import time: self [us] | cumulative | name"
    return best


def grader_of(args) -> Path:
    if args.grader:
        return Path(args.grader)
    grader = args.out / "grader"
    if not (grader / "grader.json").exists():
        print(f"exporting {args.model} to {grader} (fp32 ONNX) ...", flush=True)
        subprocess.run([sys.executable, "-m", "headcut", "export", str(args.model), "--out", str(grader),
                        "--overwrite"], check=True, capture_output=True)
    return grader


def arguments():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    teacher = ROOT / "runs" / "teacher"
    parser.add_argument("--model", default=str(teacher) if (teacher / "headcut.json").exists() else "minilm-l6",
                        help="model to probe (and to export when --grader is not given)")
    parser.add_argument("--grader", help="exported grader folder to serve and grade (default: export --model)")
    parser.add_argument("--rows", type=whole(), default=1000, help="dev pairs `headcut-grader grade` grades")
    parser.add_argument("--requests", type=whole(), default=20, help="requests of 8 pairs each server answers")
    parser.add_argument("--probe-pairs", type=whole(), default=32, help="long pairs `headcut probe` reads")
    parser.add_argument("--probe-length", type=whole(SEQ_LEN), default=256,
                        help="tokens per probed pair (--max-length)")
    parser.add_argument("--repeats", type=whole(REPEATS), default=5,
                        help="import-time runs per package (the least counts)")
    parser.add_argument("--out", default=ROOT / "runs" / "memory", help="folder for the grader and files")
    parser.add_argument("--quick", action="store_true", help="small sizes: checks that everything runs")
    args = parser.parse_args()
    args.out = out_dir(parser, args.out, inputs=[args.model])
    if args.quick:
        args.rows, args.requests, args.probe_pairs, args.probe_length, args.repeats = 200, 4, 8, 128, 1
    return args


def main() -> None:
    args = arguments()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"machine: {describe()}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    grader = grader_of(args)
    results = {f"headcut serve, 1 worker ({args.requests} requests)": served(grader, 1, args.requests),
               f"headcut serve --workers 2: master ({args.requests} requests)": served(grader, 2, args.requests)}
    pairs = write_pairs(args.out / "pairs.tsv", dev_rows(args.rows))
    results[f"headcut-grader grade --workers 2: master ({args.rows} pairs)"] = launched(
        args.out / "grade.status", "headcut_grader", "grade", str(grader), str(pairs), "--out",
        str(args.out / "grades.tsv"), "--overwrite", "--workers", "2", "--threads", "1")
    title = " ".join(WORDS[i % len(WORDS)] for i in range(args.probe_length // 4))  # ~8 tokens per phrase
    long_pairs = write_pairs(args.out / "long_pairs.tsv", [(q, f"{t} {title}") for q, t in dev_rows(args.probe_pairs)])
    results[f"headcut probe ({args.probe_pairs} pairs of {args.probe_length} tokens)"] = launched(
        args.out / "probe.status", "headcut", "probe", "--model", str(args.model), "--data", str(long_pairs),
        "--out", str(args.out / "probe"), "--overwrite", "--max-length", str(args.probe_length))
    print(f"\ngrader {grader}, model {args.model}\n")
    print("| process | peak RSS (VmHWM) MiB | RSS at the reading MiB | seconds |\n|---|---:|---:|---:|")
    for name, r in results.items():
        workers = (f" (workers' peaks: {', '.join(f'{w:.0f}' for w in r['workers_hwm'])} MiB)"
                   if r.get("workers_hwm") else "")
        print(f"| {name}{workers} | {r['VmHWM']:.0f} | {r['VmRSS']:.0f} | {r['seconds']:.1f} |")
    print(f"\n| import | ms (least of {args.repeats}) |\n|---|---:|")
    for module in ("headcut", "headcut_grader", "headcut.cli.main", "headcut_grader.cli.main"):
        print(f"| `import {module}` | {import_ms(module, args.repeats):.0f} |")
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
