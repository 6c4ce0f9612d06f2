"""`headcut serve`: an HTTP JSON API over an exported grader (needs `pip install headcut[serve]`)."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from headcut_grader.cli.common import Opt, number, user_errors


@user_errors
def serve(
    grader_dir: Path = typer.Argument(..., help="Folder written by `headcut export`."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 exposes it to the network)."),
    port: int = number(8000, "--port", help="TCP port", low=1, high=65535),
    workers: int = number(1, "--workers", help="Worker processes (one grader each); about one per 1-2 cores",
                          low=1, high=256),
    threads: Opt[int] = number(None, "--threads", help="ONNX Runtime threads per worker (default: cores / workers)",
                               low=1, kind=int),
    max_pairs: int = number(256, "--max-pairs", help="Most pairs (or titles) in one request", low=1),
    max_text_chars: int = number(2000, "--max-text-chars", help="Longest query or title, in characters", low=1),
    max_body_bytes: int = number(1_000_000, "--max-body-bytes", help="Largest request body", low=100),
):
    """Serve GRADER_DIR: POST /grade, POST /rank, GET /healthz, GET /metrics.

    Example: headcut serve runs/grader --port 8000 --workers 2, then
    curl -s localhost:8000/grade -d '{"pairs": [{"query": "drill", "title": "cordless drill"}]}'
    """
    import socket

    from headcut_grader.errors import UserError
    from headcut_grader.grader import Grader
    from headcut_grader.serve import ENV_DIR, ENV_LIMITS, ENV_THREADS, Limits

    try:
        import uvicorn
    except ImportError:
        raise UserError("headcut serve needs FastAPI and uvicorn; run: pip install 'headcut[serve]'.") from None
    Grader(grader_dir, threads=1)  # a bad folder or a damaged model.onnx fails here with one sentence, not in every worker
    try:  # a taken port or a mistyped host: one sentence now rather than uvicorn's log line and exit 1
        with socket.create_server((host, port)):
            pass
    except (OSError, OverflowError) as e:
        raise UserError(f"--host {host} --port {port}: cannot listen there ({getattr(e, 'strerror', None) or e}); "
                        "choose another --port or --host.") from None
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    os.environ[ENV_DIR] = str(grader_dir)
    os.environ[ENV_THREADS] = str(threads)
    os.environ[ENV_LIMITS] = Limits(max_body_bytes, max_pairs, max_text_chars).encode()
    typer.echo(f"serving {grader_dir} on http://{host}:{port} ({workers} worker(s) x {threads} thread(s))")
    uvicorn.run("headcut_grader.serve:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level="warning")
