"""`headcut serve`: an HTTP JSON API over an exported grader (needs `pip install headcut[serve]`)."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from headcut.cli.common import Opt, user_errors


@user_errors
def serve(
    grader_dir: Path = typer.Argument(..., help="Folder written by `headcut export`."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0 exposes it to the network)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    workers: int = typer.Option(1, "--workers", help="Worker processes (one grader each); about one per 1-2 cores."),
    threads: Opt[int] = typer.Option(None, "--threads", help="ONNX Runtime threads per worker (default: cores / workers)."),
    max_pairs: int = typer.Option(256, "--max-pairs", help="Most pairs (or titles) in one request."),
    max_text_chars: int = typer.Option(2000, "--max-text-chars", help="Longest query or title, in characters."),
    max_body_bytes: int = typer.Option(1_000_000, "--max-body-bytes", help="Largest request body."),
):
    """Serve GRADER_DIR: POST /grade, POST /rank, GET /healthz, GET /metrics.

    Example: headcut serve runs/grader --port 8000 --workers 2, then
    curl -s localhost:8000/grade -d '{"pairs": [{"query": "drill", "title": "cordless drill"}]}'
    """
    from headcut.errors import UserError
    from headcut.grader import read_record
    from headcut.serve import ENV_DIR, ENV_LIMITS, ENV_THREADS, Limits

    try:
        import uvicorn
    except ImportError:
        raise UserError("headcut serve needs FastAPI and uvicorn; run: pip install 'headcut[serve]'.") from None
    read_record(grader_dir)  # a bad folder fails here with one sentence, not in every worker
    if workers < 1:
        raise UserError("--workers must be at least 1.")
    threads = threads or max(1, (os.cpu_count() or 1) // workers)
    os.environ[ENV_DIR] = str(grader_dir)
    os.environ[ENV_THREADS] = str(threads)
    os.environ[ENV_LIMITS] = Limits(max_body_bytes, max_pairs, max_text_chars).encode()
    typer.echo(f"serving {grader_dir} on http://{host}:{port} ({workers} worker(s) x {threads} thread(s))")
    uvicorn.run("headcut.serve:app_from_env", factory=True, host=host, port=port, workers=workers,
                log_level="warning")
