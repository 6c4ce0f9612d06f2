"""`headcut serve`: an HTTP JSON API over an exported grader (needs `pip install 'headcut-grader[serve]'`)."""
from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path

import typer

from headcut_grader.backends import INSTALL
from headcut_grader.cli.common import BACKEND, Opt, field_option, number, number_in, user_errors
from headcut_grader.ranges import THREADS, WORKERS
from headcut_grader.serve import Batching, Limits
from headcut_grader.serve_middleware import MIN_BODY_BYTES_PER_SECOND

# uvicorn closes a connection idle for 5 s, the very expiry of httpx's pool: a client reusing one just then got
# "Server disconnected" or a reset (2 in 5,000 keep-alive requests). Above the 60 s of ALBs and nginx upstreams.
KEEP_ALIVE_SECONDS = 75.0


@user_errors
def serve(
    grader_dir: Path = typer.Argument(..., help="Folder written by `headcut export`."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 exposes it to the network; "
                             "an IPv6 one as ::1 or [::1])."),
    port: int = number(8000, "--port", help="TCP port", low=1, high=65535),
    workers: int = number_in(WORKERS, 1, "--workers", help="Worker processes (one grader each, each with its own "
                             "socket on the port, so connections spread over them); on 2 cores: --workers 2 "
                             "--threads 1"),
    threads: Opt[int] = number_in(THREADS, None, "--threads", help="Runtime threads per worker (default: cores / "
                                  "workers)", kind=int),
    backend: str = BACKEND,
    max_pairs: int = field_option(Limits, "max_pairs", "--max-pairs", help="Most pairs (or titles) in one request"),
    max_text_chars: int = field_option(Limits, "max_text_chars", "--max-text-chars",
                                       help="Longest query or title, in characters"),
    max_body_bytes: int = field_option(Limits, "max_body_bytes", "--max-body-bytes", help="Largest request body"),
    body_timeout_seconds: float = field_option(Limits, "body_timeout_seconds", "--body-timeout-seconds",
                                               help="Idle timeout for a request's body: a client that sends none "
                                               "of it for this long gets 408 and is disconnected, as does one still "
                                               "sending after this long plus 1 s per "
                                               f"{MIN_BODY_BYTES_PER_SECOND // 1024} KiB received (a trickle)"),
    header_timeout_seconds: float = field_option(Limits, "header_timeout_seconds", "--header-timeout-seconds",
                                                 help="Time for a request's line and headers to arrive, from the "
                                                 "connection's opening or a kept-alive connection's next byte: a "
                                                 "client still sending them then gets 408 and is disconnected"),
    max_held_bytes: int = field_option(Limits, "max_held_bytes", "--max-held-bytes", help="Most bytes of request "
                                       "bodies one worker holds at once (arriving, or their requests not yet "
                                       "answered); past it a request gets 503 with Retry-After (at least "
                                       "--max-body-bytes)"),
    max_batch: int = field_option(Batching, "max_batch", "--max-batch", help="Most pairs in one grader run made of "
                                  "concurrent requests (whole requests; 1 turns merging off)"),
    max_wait_ms: float = field_option(Batching, "max_wait_ms", "--max-wait-ms", help="How long a request may wait "
                                      "for others to share its run, in milliseconds"),
    max_queue: int = field_option(Batching, "max_queue", "--max-queue", help="Pairs waiting per worker before new "
                                  "requests get 503 with Retry-After (at least --max-pairs)"),
    batch_size: int = field_option(Batching, "batch_size", "--batch-size", help="Pairs per runtime call (ONNX "
                                   "Runtime or OpenVINO) within a run (the run is sorted by length first)"),
    drain_seconds: float = number(30.0, "--drain-seconds", help="On SIGTERM/Ctrl-C: how long requests already "
                                  "taken may take to finish; any still unanswered then get 503", low=0.0,
                                  high=3600.0),
    keep_alive_seconds: float = number(KEEP_ALIVE_SECONDS, "--keep-alive-seconds", help="How long an idle keep-alive "
                                       "connection stays open; keep it above the idle timeout of the clients' "
                                       "connection pools and load balancers (httpx 5 s, aiohttp 15 s, AWS ALB and "
                                       "nginx 60 s), or a request sent as the server closes the connection is lost",
                                       low=1.0, high=86_400.0),
):
    """Serve GRADER_DIR: POST /grade, POST /rank, GET /healthz, GET /metrics.

    Example: headcut serve runs/grader --port 8000 --workers 2, then
    curl -s localhost:8000/grade -H 'Content-Type: application/json'
    -d '{"pairs": [{"query": "drill", "title": "cordless drill"}]}'
    """
    import socket

    from headcut_grader.errors import UserError
    from headcut_grader.grader import Grader
    from headcut_grader.serve import ENV_SETTINGS, Settings, check_serving
    from headcut_grader.serve_metrics import ENV_MULTIPROC, unavailable
    from headcut_grader.workers import APP, address_family, http_url, reuse_port_supported, run_workers, unbracketed

    from headcut_grader.optional import optional_module

    uvicorn = optional_module("uvicorn")
    if uvicorn is None:
        raise UserError(f"serve needs FastAPI and uvicorn; run: {INSTALL['serve']}.")
    from headcut_grader.serve_internals import check_uvicorn  # imports uvicorn
    from headcut_grader.serve_protocol import HeadTimedProtocol

    check_uvicorn()  # the head deadline's uvicorn internals, before the grader loads

    limits, batching = check_serving(Limits(max_body_bytes, max_pairs, max_text_chars, body_timeout_seconds,
                                            header_timeout_seconds, max_held_bytes),
                                     Batching(max_batch, max_wait_ms, max_queue, batch_size), flags=True)
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    host = unbracketed(host)  # [::1], as a URL writes it: was looked up as a name, "cannot listen there"
    # a bad folder or a damaged graph fails here with one sentence, not in every worker; auto is resolved once
    grader = Grader(grader_dir, threads=threads, backend=backend, names="flags")
    try:  # a taken port or a mistyped host: one sentence now rather than uvicorn's log line and exit 1
        with socket.create_server((host, port), family=address_family(host)):
            pass
    except (OSError, OverflowError) as e:
        raise UserError(f"--host {host} --port {port}: cannot listen there ({getattr(e, 'strerror', None) or e}); "
                        "choose another --port or --host.") from None
    settings = Settings(str(grader_dir), threads, limits, batching, grader.backend.name, internals_checked=True)
    os.environ[ENV_SETTINGS] = settings.encode()
    # a fresh folder per run: the workers' metric files are summed, and an old run's would be summed in
    metrics_dir = tempfile.mkdtemp(prefix="headcut-metrics-")
    os.environ[ENV_MULTIPROC] = metrics_dir
    typer.echo(f"serving {grader_dir} with {grader.backend.name} {grader.backend.version} ({grader.precision}; "
               f"{grader.backend_reason}) on {http_url(host, port)} ({workers} worker(s) x {threads} thread(s), "
               f"batches of up to {max_batch} pairs within {max_wait_ms:g} ms, queue {max_queue} pairs per worker)")
    del grader  # checked and summed up: each worker loads its own, and this one would sit idle in memory
    if metrics_said := unavailable():
        typer.echo(f"note: {metrics_said}", err=True)
    # uvicorn drains, then re-raises the SIGTERM it caught under whatever handler was there before it:
    # this one turns it into a normal exit (status 0, the metrics folder removed) instead of death by signal
    signal.signal(signal.SIGTERM, _drained)
    options = dict(log_level="warning", timeout_graceful_shutdown=drain_seconds, timeout_keep_alive=keep_alive_seconds,
                   http=HeadTimedProtocol)
    try:
        if workers > 1 and reuse_port_supported():  # one socket per worker: connections spread evenly (workers.py)
            code = run_workers(workers, host, port, options)
            if code:
                raise UserError(f"a worker of headcut serve {grader_dir} stopped with an error; see its output above.")
        else:
            uvicorn.run(APP, factory=True, host=host, port=port, workers=workers, **options)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _drained(signum, frame):
    raise SystemExit(0)
