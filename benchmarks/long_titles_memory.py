"""Peak memory of `headcut grade` against title length: ROWS pairs whose titles are ordinary product words repeated
to 1k, 100k and 1M characters, graded at the default --chunk-rows, side by side.

    .venv/bin/python benchmarks/long_titles_memory.py GRADER_DIR [--rows 200] [--chars 1000,100000,1000000]
        [--out runs/long_titles_memory]

Each size runs `python -m headcut grade` as a child process; its peak RSS is the ru_maxrss that os.wait4 reports for
that child alone. This script imports neither torch nor headcut, so the child does not start from a large parent
(Linux carries ru_maxrss over fork and exec). Prints the CPU model, the load average before and after, and the
command; the files (up to ROWS MB per million characters, twice: input and output) go to OUT and are removed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench_flags import out_dir, several, whole
from headcut_grader.files import atomic_file

WORDS = ("Ridgeline 20-volt cordless drill in black", "HomeMax 36 in. brushed nickel pull-down kitchen faucet",
         "Everbuild 5 gal. semi-gloss exterior paint in white", "Northwind 60 ft. expandable garden hose")


def write_titles(path: Path, rows: int, chars: int) -> Path:
    text = " ".join(WORDS[i % len(WORDS)] for i in range(chars // 40 + 1))[:chars].strip()
    with atomic_file(path, binary=False) as f:
        f.write("query\ttitle\n")
        for i in range(rows):
            f.write(f"cordless drill {i}\t{text}\n")
    return path


def peak_rss(command: list[str]) -> tuple[float, float]:
    """(peak RSS in MiB, seconds) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "TQDM_DISABLE": "1"})
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"{' '.join(command)} failed: {proc.stderr.read().decode()[-500:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start  # ru_maxrss is in KiB on Linux


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("grader")
    parser.add_argument("--rows", type=whole(), default=200)
    parser.add_argument("--chars", type=several(whole()), default="1000,100000,1000000")
    parser.add_argument("--out", default=Path("runs/long_titles_memory"))
    args = parser.parse_args()
    args.out = out_dir(parser, args.out, inputs=[args.grader])
    args.out.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {load[0]:.2f} (1 min) before")
    print("| title characters | rows | file MB | peak RSS MiB | seconds |\n|---:|---:|---:|---:|---:|")
    for chars in args.chars:
        source = write_titles(args.out / f"titles{chars}.tsv", args.rows, chars)
        out = args.out / f"grades{chars}.tsv"
        command = [sys.executable, "-m", "headcut", "grade", str(args.grader), str(source), "--out", str(out),
                   "--overwrite", "--threads", "1"]
        mib, seconds = peak_rss(command)
        print(f"| {chars:,} | {args.rows} | {source.stat().st_size / 1e6:.1f} | {mib:.0f} | {seconds:.1f} |",
              flush=True)
        source.unlink()
        out.unlink()
    print(f"load average {os.getloadavg()[0]:.2f} (1 min) after; each row ran: "
          f"{' '.join(command).replace(str(chars), 'CHARS')}")


if __name__ == "__main__":
    main()
