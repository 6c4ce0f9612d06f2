"""HTTP JSON API over an exported grader (FastAPI; install with `pip install headcut[serve]`).

POST /grade {"pairs": [{"query": ..., "title": ...}]}, POST /rank {"query": ..., "titles": [...]},
GET /healthz, GET /metrics (Prometheus text). Every request is bounded (body bytes, pairs, characters per
text); anything malformed gets a 4xx with {"error": sentence}, never a 500 or a dead worker.
Like the grader, this module never imports torch.
"""
# No `from __future__ import annotations`: FastAPI must see the request models defined inside create_app.

import os
import threading
import time
from collections import Counter
from dataclasses import dataclass

ENV_DIR, ENV_THREADS, ENV_LIMITS = "HEADCUT_GRADER_DIR", "HEADCUT_THREADS", "HEADCUT_LIMITS"


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1_000_000
    max_pairs: int = 256  # per request: one request cannot hold a worker for long
    max_text_chars: int = 2_000  # longer texts are truncated to max_length tokens anyway

    def encode(self) -> str:
        return f"{self.max_body_bytes},{self.max_pairs},{self.max_text_chars}"

    @classmethod
    def decode(cls, text: str | None) -> "Limits":
        return cls(*(int(x) for x in text.split(","))) if text else cls()


class BodyLimit:
    """ASGI middleware: refuse bodies over `limit` bytes with 413, also when no Content-Length is sent."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await _send_json(send, 413, f"request body over {self.limit} bytes; send fewer pairs per request.")
        from starlette.exceptions import HTTPException

        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.limit:  # raised inside the body read, so FastAPI turns it into the 413 response
                raise HTTPException(413, f"request body over {self.limit} bytes; send fewer pairs per request.")
            return message

        await self.app(scope, counted, send)


async def _send_json(send, status: int, message: str):
    import json

    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def create_app(grader_dir, *, threads: int = 1, limits: Limits = Limits()):
    """The FastAPI app for one grader folder (one Grader per worker process)."""
    from typing import Annotated

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from pydantic import AfterValidator, BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from headcut_grader.data import text_problem
    from headcut_grader.grader import Grader

    grader = Grader(grader_dir, threads=threads)

    def checked(value: str) -> str:  # the rule `headcut grade` applies to a file's texts
        problem = text_problem(value, max_chars=limits.max_text_chars)
        if problem:
            raise ValueError(problem)
        return value

    Text = Annotated[str, Field(min_length=1, max_length=limits.max_text_chars), AfterValidator(checked)]

    class Pair(BaseModel):
        model_config = ConfigDict(extra="forbid")
        query: Text
        title: Text

    class GradeRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        pairs: list[Pair] = Field(min_length=1, max_length=limits.max_pairs)

    class RankRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        query: Text
        titles: list[Text] = Field(min_length=1, max_length=limits.max_pairs)

    app = FastAPI(title="headcut grader", version="1")
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    stats = {"requests": Counter(), "pairs": 0, "seconds": 0.0, "graded": 0}
    lock = threading.Lock()

    @app.middleware("http")
    async def count(request: Request, call_next):
        start = time.perf_counter()
        response = await call_next(request)
        # the route's template, never the raw path: a scanner's random paths share one series
        route = request.scope.get("route")
        label = getattr(route, "path", None) or "unmatched"
        with lock:
            stats["requests"][(label, response.status_code)] += 1
            stats["seconds"] += time.perf_counter() - start
        return response

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        kind = first.get("type", "")
        message = ("body is not valid JSON" if kind == "json_invalid" else f"{where}: {first.get('msg', 'invalid')}")
        return JSONResponse({"error": f"{message}; see GET /docs for the request shape."}, status_code=422)

    @app.get("/healthz")
    def healthz():
        return {"status": "ok", "precision": grader.record["precision"], "grades": grader.record["grades"],
                "model_sha256": grader.record["model_file"]["sha256"], "max_length": grader.max_length,
                "limits": limits.__dict__}

    @app.post("/grade")
    def grade(request: GradeRequest):  # sync: FastAPI runs it in its thread pool, off the event loop
        result = grader.grade([(p.query, p.title) for p in request.pairs])
        with lock:
            stats["pairs"] += len(result)
        return {"grades": grader.record["grades"], "results": result.rows()}

    @app.post("/rank")
    def rank(request: RankRequest):
        ranking = grader.rank(request.query, request.titles)
        with lock:
            stats["pairs"] += len(ranking)
        return {"query": request.query, "ranking": ranking}

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics():
        with lock:
            lines = ["# TYPE headcut_requests_total counter"]
            lines += [f'headcut_requests_total{{path="{path}",status="{status}"}} {n}'
                      for (path, status), n in sorted(stats["requests"].items())]
            lines += ["# TYPE headcut_pairs_total counter", f"headcut_pairs_total {stats['pairs']}",
                      "# TYPE headcut_request_seconds_sum counter",
                      f"headcut_request_seconds_sum {stats['seconds']:.6f}",
                      f'headcut_worker_pid {os.getpid()}']
        return "\n".join(lines) + "\n"

    return app


def app_from_env():
    """App factory for `uvicorn --factory` and several worker processes (settings travel by environment)."""
    return create_app(os.environ[ENV_DIR], threads=int(os.environ.get(ENV_THREADS, "1")),
                      limits=Limits.decode(os.environ.get(ENV_LIMITS)))
