"""`headcut serve --workers N`: N processes, each listening on its own SO_REUSEPORT socket of the same port.

uvicorn's own workers share one listening socket, and the kernel hands most connections of a burst to
whichever worker wakes first: 32 keep-alive clients could sit mostly on one single-threaded worker while
the other idles (benchmarks/serve_load.py --workers 2: 53% of offline pairs/s in such a round, 93% when
even). With one socket per worker and SO_REUSEPORT the kernel spreads new connections over the workers by
a hash of their addresses. Where SO_REUSEPORT is missing (not Linux), uvicorn's workers are used instead.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import sys
import time

from headcut_grader.serve import APP_FACTORY as APP


def reuse_port_supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def unbracketed(host: str) -> str:
    """`host` without the brackets a URL writes an IPv6 address in ([::1] -> ::1), which the socket layer and
    uvicorn would look up as a name ("Name or service not known")."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def address_family(host: str) -> int:
    """The socket family uvicorn binds `host` with: IPv6 for an address with a colon (::1, ::), else IPv4."""
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def http_url(host: str, port: int) -> str:
    """The server's address as a URL: an IPv6 host in brackets (http://[::1]:8000)."""
    return f"http://[{host}]:{port}" if address_family(host) == socket.AF_INET6 else f"http://{host}:{port}"


def listen(host: str, port: int) -> socket.socket:
    """A listening socket that other processes may bind to the same address too."""
    sock = socket.socket(address_family(host), socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def _worker(host: str, port: int, options: dict) -> None:
    import uvicorn

    # uvicorn drains, then re-raises the signal it caught under the handler that was there before: exit 0
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, _exit_cleanly)
    sock = listen(host, port)
    config = uvicorn.Config(APP, factory=True, **options)
    uvicorn.Server(config).run(sockets=[sock])  # drains on SIGTERM/SIGINT like `uvicorn.run`


def _exit_cleanly(signum, frame):
    raise SystemExit(0)


def run_workers(count: int, host: str, port: int, options: dict) -> int:
    """Start `count` workers, each a uvicorn server with `options` (uvicorn.Config keywords), and wait for them.
    SIGTERM is passed to every worker, which stops taking connections and answers what it took (a terminal's
    Ctrl-C reaches them directly). A worker that dies on its own stops the others. Returns 0 when every worker
    exited cleanly."""
    context = multiprocessing.get_context("spawn")  # settings travel in os.environ, inherited by each worker
    procs = [context.Process(target=_worker, args=(host, port, options), daemon=False) for _ in range(count)]
    for p in procs:
        p.start()
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True
        if signum == signal.SIGTERM:
            for p in procs:
                if p.is_alive():
                    os.kill(p.pid, signal.SIGTERM)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while any(p.is_alive() for p in procs):
            dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
            if dead and not stopping:
                stop(signal.SIGTERM, None)
            time.sleep(0.2)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0 if all(p.exitcode == 0 for p in procs) else 1
