"""Load test of `headcut serve` on loopback: throughput and p50/p95/p99 against concurrency for requests of
1, 8 and 32 pairs, micro-batching on and off, next to `headcut grade`'s offline pairs/s on the same grader.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/serve_load.py --grader runs/bottom3-int8 --out runs/serve_load

Two servers of --workers W processes x --server-threads threads (default: T / W, so the server and the
offline run use the same cores' worth of threads) run side by side (batching on: --max-batch/--max-wait-ms as given;
off: --max-batch 1). Each cell is a closed loop of C clients on keep-alive connections for --seconds (at
most --max-requests requests), then waits for every request in flight: nothing is cancelled, so each one
sent is counted answered or failed. A client told 503 waits its Retry-After, as a polite client does.
The headline (C=32, 8 pairs) and the offline Grader run take turns --rounds times, so load from other
processes on a shared machine hits them alike; the medians are quoted. Checks: 0 errors other than 503,
no request lost or answered twice (server-side pair count = pairs in 200 answers, each answer the size
of its request), p99 < 2 x p50 in cells without 503s. Writes OUT/serve_load.{json,md,png}.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from headcut.export.bench_settings import BenchSettings  # its threads: the toolkit's default
from headcut_grader.ranges import REPEATS, THREADS, WORKERS, Range, declared_range

sys.path.insert(0, str(Path(__file__).resolve().parent))  # as a script runs, also where a test loads it
from bench_flags import file_to_read, out_dir, real, several, whole  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEV = ROOT.parent / "shared" / "data" / "homedepot" / "dev.tsv"


def bodies_of(rows: list[tuple[str, str]], size: int, count: int) -> list[bytes]:
    """`count` request bodies of `size` consecutive pairs each (wrapping round the rows)."""
    out = []
    for i in range(count):
        pairs = [rows[(i * size + j) % len(rows)] for j in range(size)]
        out.append(json.dumps({"pairs": [{"query": q, "title": t} for q, t in pairs]}).encode())
    return out


async def _post(reader, writer, port: int, body: bytes) -> tuple[int, dict, bytes]:
    writer.write(b"POST /grade HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (port, len(body), body))
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    return int(lines[0].split()[1]), headers, await reader.readexactly(int(headers["content-length"]))


async def _cell(port: int, bodies: list[bytes], concurrency: int, seconds: float, max_requests: int) -> dict:
    """A closed loop: `concurrency` clients, each sending its next request when the previous one is answered."""
    sent, results, errors = [0], [], []
    stop = time.perf_counter() + seconds

    async def client(k: int):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < stop and sent[0] < max_requests:
                index = sent[0] % len(bodies)
                sent[0] += 1
                start = time.perf_counter()
                try:
                    status, headers, answer = await _post(reader, writer, port, bodies[index])
                except (OSError, asyncio.IncompleteReadError, ValueError) as e:
                    errors.append(repr(e))
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                results.append((status, time.perf_counter() - start, index, answer))
                if status == 503:
                    await asyncio.sleep(float(headers.get("retry-after", "1")))
        finally:
            writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(concurrency)))
    wall = time.perf_counter() - start
    return {"sent": sent[0], "results": results, "errors": errors, "wall": wall}


def summarize(cell: dict, sizes: list[int]) -> dict:
    ok = [(t, i, a) for s, t, i, a in cell["results"] if s == 200]
    latencies = [t for t, _, _ in ok]
    wrong_size = sum(len(json.loads(a)["results"]) != sizes[i] for _, i, a in ok)
    statuses = [s for s, *_ in cell["results"]]
    pairs = sum(sizes[i] for _, i, _ in ok)
    q = (lambda p: 1000 * float(np.percentile(latencies, p))) if latencies else (lambda p: float("nan"))
    return {"sent": cell["sent"], "ok": len(ok), "busy_503": statuses.count(503),
            "errors": len(cell["errors"]) + sum(s not in (200, 503) for s in statuses) + wrong_size,
            "lost": cell["sent"] - len(cell["results"]) - len(cell["errors"]), "pairs": pairs,
            "seconds": cell["wall"], "requests_per_s": len(ok) / cell["wall"], "pairs_per_s": pairs / cell["wall"],
            "p50_ms": q(50), "p95_ms": q(95), "p99_ms": q(99)}


def graded_pairs(url: str) -> float | None:
    """The server's own count of pairs graded (None without prometheus_client)."""
    import httpx

    reply = httpx.get(url + "/metrics", timeout=30)
    if reply.status_code != 200:
        return None
    return sum(float(line.split()[-1]) for line in reply.text.splitlines() if line.startswith("headcut_pairs_total"))


def server_pids(port: int) -> list[int]:
    """The processes serving `port` (the `headcut serve` command started with it, and its descendants); [] off Linux."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    parents = {}
    roots = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"serve" in cmd and b"--port" in cmd and cmd[cmd.index(b"--port") + 1] == str(port).encode():
            roots.append(int(d.name))
    found = set(roots)
    while True:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        if not more:
            return sorted(found)
        found |= more


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far, all their threads included."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def measure(url: str, port: int, bodies: list[bytes], size: int, concurrency: int, args) -> dict:
    before = graded_pairs(url)
    pids = server_pids(port)
    server_cpu, client_cpu = cpu_seconds(pids), time.process_time()
    cell = asyncio.run(_cell(port, bodies, concurrency, args.seconds, args.max_requests))
    server_cpu, client_cpu = cpu_seconds(pids) - server_cpu, time.process_time() - client_cpu
    row = summarize(cell, [size] * len(bodies))
    # where the CPU went: milliseconds per 1,000 pairs answered, in the server and in this load generator
    row["server_cpu_ms_per_1k"] = 1e6 * server_cpu / row["pairs"] if row["pairs"] and pids else None
    row["client_cpu_ms_per_1k"] = 1e6 * client_cpu / row["pairs"] if row["pairs"] else None
    row["server_busy"] = server_cpu / row["seconds"] if pids else None  # cores' worth of CPU the server used
    after = graded_pairs(url)
    # each pair graded once and answered once: the server's count moves by exactly the pairs answered 200
    row["server_pairs"] = None if before is None else after - before
    row["double_or_lost"] = None if before is None else int(row["server_pairs"] != row["pairs"])
    return {"size": size, "concurrency": concurrency, **row}


def server_shape(report: dict) -> str:
    workers, threads = report.get("workers", 1), report.get("server_threads", report["threads"])
    return f"{workers} worker{'s' if workers > 1 else ''} x {threads} thread{'s' if threads > 1 else ''}"


def offline(grader, rows: list[tuple[str, str]]) -> tuple[float, float]:
    """Pairs/s of grading `rows` in this process, and its CPU milliseconds per 1,000 pairs."""
    start, cpu = time.perf_counter(), time.process_time()
    grader.grade(rows)
    return len(rows) / (time.perf_counter() - start), 1e6 * (time.process_time() - cpu) / len(rows)


def markdown(report: dict) -> str:
    h = report["headline"]
    lines = [f"{report['machine']}; load average before: {report['load_before']}, after: {report['load_after']}.",
             f"Grader {report['grader']} ({report.get('backend', 'onnxruntime')} {report['precision']}), "
             f"server {server_shape(report)}, offline 1 x {report['threads']} threads; batching on: "
             f"--max-batch {report['max_batch']} --max-wait-ms {report['max_wait_ms']} --max-queue "
             f"{report['max_queue']} --batch-size {report['batch_size']}; off: --max-batch 1. "
             f"{report['seconds']} s per cell.", "",
             f"Headline, C=32 x 8 pairs, medians of {report['rounds']} rounds taken in turns with offline grading:",
             "", "| | pairs/s | vs offline | p50 ms | p99 ms | 503 | errors |", "|---|---:|---:|---:|---:|---:|---:|",
             f"| `headcut grade` offline (Grader, batch 32) | {h['offline_pairs_per_s']:.0f} | 100% | | | | |"]
    for mode in ("on", "off"):
        r = h[mode]
        lines.append(f"| served, batching {mode} | {r['pairs_per_s']:.0f} "
                     f"| {r['pairs_per_s'] / h['offline_pairs_per_s']:.0%} "
                     f"| {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['busy_503']} | {r['errors']} |")
    on = h["on"]
    if on.get("server_cpu_ms_per_1k"):
        lines += ["", f"Where the CPU went (batching on, medians): grading offline took "
                  f"{h['offline_cpu_ms_per_1k']:.0f} CPU ms "
                  f"per 1,000 pairs; serving took {on['server_cpu_ms_per_1k']:.0f} in the server and "
                  f"{on['client_cpu_ms_per_1k']:.0f} in the load generator on the same cores; the server kept "
                  f"{on['server_busy']:.2f} of {report['cores']} cores busy."]
    lines += ["", "| pairs/request | C | batching | req/s | pairs/s | p50 ms | p95 ms | p99 ms | p99/p50 | 503 "
              "| errors | lost | server pairs = answered |",
              "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["cells"]:
        same = {None: "n/a", 0: "yes", 1: "NO"}[r["double_or_lost"]]
        lines.append(f"| {r['size']} | {r['concurrency']} | {r['mode']} | {r['requests_per_s']:.1f} "
                     f"| {r['pairs_per_s']:.0f} "
                     f"| {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['p99_ms']:.0f} | {r['p99_ms'] / r['p50_ms']:.2f} "
                     f"| {r['busy_503']} | {r['errors']} | {r['lost']} | {same} |")
    c = report["checks"]
    lines += ["", f"Checks: served/offline at C=32 x 8 = {c['ratio']:.0%} (target >= 80%): {c['ratio_ok']}; "
              f"errors other than 503: {c['errors']}; lost: {c['lost']}; server pairs != answered pairs in "
              f"{c['double_or_lost']} cells; p99 >= 2 x p50 in {len(c['tail_over'])} of {c['below_capacity']} cells "
              f"without 503s {c['tail_over']}."]
    return "\n".join(lines) + "\n"


def figure(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from headcut_grader.files import atomic_file

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for size, color in zip((1, 8, 32), ("tab:blue", "tab:orange", "tab:green")):
        for mode, style in (("on", "-"), ("off", ":")):
            rows = [r for r in report["cells"] if r["size"] == size and r["mode"] == mode]
            cs = [r["concurrency"] for r in rows]
            axes[0].plot(cs, [r["pairs_per_s"] for r in rows], style, color=color, marker="o",
                         label=f"{size} pairs, {mode}")
            axes[1].plot(cs, [r["p99_ms"] for r in rows], style, color=color, marker="o", label=f"{size} pairs, {mode}")
            busy = [r for r in rows if r["busy_503"]]
            axes[1].scatter([r["concurrency"] for r in busy], [r["p99_ms"] for r in busy], s=90, facecolors="none",
                            edgecolors="red")
    axes[0].axhline(report["headline"]["offline_pairs_per_s"], color="gray", ls="--", label="offline `headcut grade`")
    axes[0].set_ylabel("pairs/s served")
    axes[1].set_ylabel("p99 latency ms (red ring: cell with 503s)")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"headcut serve, {server_shape(report)}, batching on (solid) vs off (dotted)", fontsize=9)
    fig.tight_layout()
    with atomic_file(path) as f:
        fig.savefig(f, format=Path(path).suffix[1:], dpi=120)


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; the servers' batching flags default to what `headcut serve` declares (serve.Batching)."""
    from headcut_grader.serve import Batching, Limits

    serving = Batching()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grader", default="runs/bottom3-int8")
    parser.add_argument("--data", type=file_to_read(), default=str(DEV))
    parser.add_argument("--out", default="runs/serve_load")
    parser.add_argument("--threads", type=whole(THREADS), default=BenchSettings.threads,
                        help="offline grading's threads, and the servers' in all")
    parser.add_argument("--workers", type=whole(WORKERS), default=1,
                        help="server processes (headcut serve --workers)")
    parser.add_argument("--server-threads", type=whole(THREADS), default=None,
                        help="per server worker (default: threads / workers)")
    parser.add_argument("--concurrency", type=several(whole()), default="1,2,4,8,16,32,64")
    parser.add_argument("--sizes", type=several(whole(declared_range(Limits, "max_pairs"))), default="1,8,32")
    parser.add_argument("--seconds", type=real(Range(0.0, low_open=True)), default=3.0, help="per cell")
    parser.add_argument("--max-requests", type=whole(), default=3000, help="per cell")
    parser.add_argument("--rounds", type=whole(REPEATS), default=3, help="headline rounds, taking turns with offline")
    parser.add_argument("--offline-pairs", type=whole(), default=2048)
    parser.add_argument("--max-batch", type=whole(declared_range(Batching, "max_batch")), default=serving.max_batch)
    parser.add_argument("--max-wait-ms", type=real(declared_range(Batching, "max_wait_ms")),
                        default=serving.max_wait_ms)
    parser.add_argument("--max-queue", type=whole(declared_range(Batching, "max_queue")), default=serving.max_queue)
    parser.add_argument("--batch-size", type=whole(declared_range(Batching, "batch_size")), default=serving.batch_size,
                        help="the servers' runtime batch")
    parser.add_argument("--backend", default="auto", help="onnxruntime, openvino or auto, for the servers and offline")
    args = parser.parse_args(argv)
    out_dir(parser, args.out, inputs=[args.grader])
    return args


def main():
    args = arguments()
    per_worker = args.server_threads or max(1, args.threads // args.workers)

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from headcut_grader.data import read_pairs
    from headcut.export.server_load import running_server
    from headcut_grader.files import write_json, write_text
    from headcut_grader.grader import Grader
    from machine import describe, machine

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pairs = read_pairs(args.data, preset="homedepot", require_labels=False)
    rows = list(zip(pairs.queries, pairs.titles))[:8192]
    sizes, concurrency = args.sizes, args.concurrency
    grader = Grader(args.grader, threads=args.threads, backend=args.backend)  # the runtime's offline batch
    common = ("--max-queue", str(args.max_queue), "--max-pairs", str(max(*sizes, 8)),
              "--batch-size", str(args.batch_size), "--backend", grader.backend.name)
    modes = {"on": ("--max-batch", str(args.max_batch), "--max-wait-ms", str(args.max_wait_ms), *common),
             "off": ("--max-batch", "1", *common)}
    load_before = os.getloadavg()
    report = {"machine": describe(machine()), "cores": os.cpu_count(), "grader": args.grader,
              "precision": grader.precision, "backend": f"{grader.backend.name} {grader.backend.version}",
              "threads": args.threads, "workers": args.workers, "server_threads": per_worker,
              "max_batch": args.max_batch, "max_wait_ms": args.max_wait_ms, "max_queue": args.max_queue,
              "batch_size": args.batch_size, "seconds": args.seconds, "rounds": args.rounds,
              "load_before": " ".join(f"{x:.2f}" for x in load_before), "cells": []}
    serve = {"workers": args.workers, "threads": per_worker, "cwd": ROOT}
    with running_server(args.grader, args=modes["on"], **serve) as on_url, \
            running_server(args.grader, args=modes["off"], **serve) as off_url:
        urls = {"on": on_url, "off": off_url}
        ports = {m: int(u.rsplit(":", 1)[1]) for m, u in urls.items()}
        bodies = {s: bodies_of(rows, s, max(64, 2048 // s)) for s in {*sizes, 8}}  # 8: the headline
        for mode in urls:  # warm-up: first runs of each shape are slow
            measure(urls[mode], ports[mode], bodies[8], 8, 8, argparse.Namespace(seconds=1.0, max_requests=200))
        offline(grader, rows[:256])
        headline = {"offline": [], "offline_cpu": [], "on": [], "off": []}
        for _ in range(args.rounds):
            rate, cpu = offline(grader, rows[:args.offline_pairs])
            headline["offline"].append(rate)
            headline["offline_cpu"].append(cpu)
            for mode in ("on", "off"):
                headline[mode].append(measure(urls[mode], ports[mode], bodies[8], 8, 32, args))
            on = headline["on"][-1]
            print(f"round: offline {headline['offline'][-1]:.0f} pairs/s, served on {on['pairs_per_s']:.0f}, "
                  f"off {headline['off'][-1]['pairs_per_s']:.0f}; CPU ms per 1k pairs: offline {cpu:.0f}, server "
                  f"{on['server_cpu_ms_per_1k'] or float('nan'):.0f} + load generator {on['client_cpu_ms_per_1k']:.0f} "
                  f"(server busy {on['server_busy'] or float('nan'):.2f} cores)", flush=True)
        for size in sizes:
            for c in concurrency:
                for mode in ("on", "off"):
                    row = {**measure(urls[mode], ports[mode], bodies[size], size, c, args), "mode": mode}
                    report["cells"].append(row)
                    print(f"{size:>2} pairs x C={c:<2} batching {mode:<3}: {row['pairs_per_s']:6.0f} pairs/s, p50 "
                          f"{row['p50_ms']:6.0f} ms, p99 {row['p99_ms']:6.0f} ms, 503: {row['busy_503']}, errors: "
                          f"{row['errors']}", flush=True)
    report["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    def median_row(rows):
        return {k: (statistics.median(r[k] for r in rows) if isinstance(rows[0][k], float)
                    else sum(r[k] or 0 for r in rows))
                for k in ("pairs_per_s", "p50_ms", "p99_ms", "busy_503", "errors", "lost", "server_cpu_ms_per_1k",
                          "client_cpu_ms_per_1k", "server_busy")}

    report["headline"] = {"offline_pairs_per_s": statistics.median(headline["offline"]),
                          "offline_cpu_ms_per_1k": statistics.median(headline["offline_cpu"]),
                          "offline_rounds": headline["offline"], "on": median_row(headline["on"]),
                          "off": median_row(headline["off"]), "on_rounds": headline["on"],
                          "off_rounds": headline["off"]}
    everything = report["cells"] + headline["on"] + headline["off"]
    quiet = [r for r in report["cells"] if r["busy_503"] == 0 and r["ok"]]
    ratio = report["headline"]["on"]["pairs_per_s"] / report["headline"]["offline_pairs_per_s"]
    report["checks"] = {"ratio": ratio, "ratio_ok": "pass" if ratio >= 0.8 else "FAIL",
                        "errors": sum(r["errors"] for r in everything), "lost": sum(r["lost"] for r in everything),
                        "double_or_lost": sum(r["double_or_lost"] or 0 for r in everything),
                        "below_capacity": len(quiet),
                        "tail_over": [f"{r['size']}x{r['concurrency']} {r['mode']}" for r in quiet
                                      if r["p99_ms"] >= 2 * r["p50_ms"]]}
    write_json(out / "serve_load.json", report)
    write_text(out / "serve_load.md", markdown(report))
    figure(report, out / "serve_load.png")
    print(markdown(report))


if __name__ == "__main__":
    main()
