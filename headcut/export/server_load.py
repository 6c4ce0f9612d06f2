"""A grader server for a load test: `headcut serve` started on a free loopback port, and concurrent POSTs to it."""
from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from headcut.export.bench import percentile


@contextmanager
def running_server(grader: str | Path, *, workers: int = 1, threads: int = 1, args: tuple[str, ...] = (),
                   wait_seconds: float = 120.0, cwd: str | Path | None = None):
    """Start `headcut serve GRADER` on a free loopback port and yield its URL once /healthz answers.

    Raises RuntimeError with the server's own output when it exits or does not answer in time; the
    server is stopped on leaving the block.
    """
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "headcut", "serve", str(Path(grader).resolve()), "--port", str(port),
           "--workers", str(workers), "--threads", str(threads), *args]
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + wait_seconds
            while True:
                if proc.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"headcut serve exited ({proc.returncode}): "
                                       f"{log.read().decode(errors='replace')[-2000:]}")
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"headcut serve did not answer /healthz on {url} within {wait_seconds:.0f} s")
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def load_test(url: str, bodies: list[dict], *, concurrency: int = 8, path: str = "/grade",
              timeout: float = 60.0) -> dict:
    """POST every body once with `concurrency` clients in flight; requests/s, pairs/s, latency and errors."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    def send(client, body):
        start = time.perf_counter()
        try:
            ok = client.post(url + path, json=body).status_code == 200
        except httpx.HTTPError:
            ok = False
        return ok, time.perf_counter() - start

    with httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=concurrency)) as client:
        start = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(lambda b: send(client, b), bodies))
        wall = time.perf_counter() - start
    latencies = [t for _, t in results]
    pairs = sum(len(b.get("pairs", b.get("titles", []))) for b in bodies)
    return {"requests": len(bodies), "errors": sum(not ok for ok, _ in results), "concurrency": concurrency,
            "seconds": wall, "requests_per_s": len(bodies) / wall, "pairs_per_s": pairs / wall,
            "p50_ms": 1000 * statistics.median(latencies), "p95_ms": 1000 * percentile(latencies, 95)}
