"""HTTP JSON API over an exported grader (FastAPI; install with `pip install 'headcut-grader[serve]'`).

POST /grade {"pairs": [{"query": ..., "title": ...}]}, POST /rank {"query": ..., "titles": [...]},
GET /healthz, GET /metrics (Prometheus text, all workers); HEAD too for both. POST bodies are JSON (Content-Type:
application/json, UTF-8). Every request is bounded (body bytes, pairs, characters per text); anything malformed gets
a 4xx with {"error": sentence}, never a 500 or a dead worker.
Concurrent requests share grader runs (headcut_grader.microbatch); a worker whose queue is full answers 503 with
Retry-After at once. A stopping worker (SIGTERM) takes no new connections and answers every request it already
took: with its grades, or with 503 "shutting down" when the drain deadline (--drain-seconds) passes first.
Like the grader, this module never imports torch.
"""
# No `from __future__ import annotations`: FastAPI must see the request models defined inside create_app.

import asyncio
import json
import os
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

from headcut_grader.ranges import ranged
from headcut_grader.serve_middleware import RETRY_AFTER_SECONDS, SHUTTING_DOWN, DrainDeadline, JsonBody, Measured

ENV_SETTINGS = "HEADCUT_SERVE"  # the CLI's settings, read by each worker process


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = ranged(1_000_000, 100)
    max_pairs: int = ranged(256, 1)  # per request (titles for /rank): one request cannot hold a worker for long
    max_text_chars: int = ranged(2_000, 1)  # longer texts are truncated to max_length tokens anyway


@dataclass(frozen=True)
class Batching:
    # benchmarks/serve_load.py: large runs sorted by length into small ORT batches pad least; a 2 ms
    # window gathers the burst of requests that a finished run's answers set off
    max_batch: int = ranged(256, 1, 65536)  # pairs per grader run; whole requests only, so 1 turns merging off
    max_wait_ms: float = ranged(2.0, 0.0, 10_000.0)  # a quiet server waits for company; under load batches fill anyway
    max_queue: int = ranged(512, 1, 10_000_000)  # pairs waiting per worker before new requests get 503
    batch_size: int = ranged(16, 1, 65536)  # pairs per ONNX Runtime call within a run, the run sorted by length


@dataclass(frozen=True)
class Settings:
    grader_dir: str
    threads: int = 1
    limits: Limits = Limits()
    batching: Batching = Batching()
    backend: str = "auto"  # the CLI resolves auto once, so every worker runs the same graph

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> "Settings":
        raw = json.loads(text)
        return cls(raw["grader_dir"], raw["threads"], Limits(**raw["limits"]), Batching(**raw["batching"]),
                   raw.get("backend", "auto"))


def create_app(grader_dir, *, threads: int = 1, limits: Limits = Limits(), batching: Batching = Batching(),
               backend: str = "auto"):
    """The FastAPI app for one grader folder (one Grader and one micro-batcher per worker process)."""
    from typing import Annotated

    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse, Response
    from pydantic import AfterValidator, BaseModel, ConfigDict, Field
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from headcut_grader.data import text_problem
    from headcut_grader.grader import Grader, ranking
    from headcut_grader.microbatch import Batcher, Closed, QueueFull
    from headcut_grader.serve_metrics import MISSING, make_metrics

    grader = Grader(grader_dir, threads=threads, batch_size=batching.batch_size, backend=backend)
    metrics = make_metrics()

    def on_batch(stats):
        metrics.batch(stats)
        metrics.waiting(batcher.waiting)

    batcher = Batcher(grader.grade, max_batch=batching.max_batch, max_wait=batching.max_wait_ms / 1000,
                      max_queue=batching.max_queue, on_batch=on_batch)

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

    @asynccontextmanager
    async def lifespan(app):
        yield
        # uvicorn gets here once every request it took was answered (by DrainDeadline when its graceful
        # timeout passed): only a run already started may be left, and the event loop must not block on it
        await asyncio.to_thread(batcher.close, timeout=60)
        metrics.close()

    app = FastAPI(title="headcut grader", version="1", lifespan=lifespan)
    app.add_middleware(DrainDeadline)  # inside Measured, which then counts its 503s
    app.add_middleware(JsonBody, limit=limits.max_body_bytes)
    app.add_middleware(Measured, metrics=metrics)  # added last: outermost, so it sees 413s, 415s and 400s too

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

    @app.exception_handler(QueueFull)
    async def busy(request: Request, exc: QueueFull):
        return JSONResponse({"error": f"server busy: {exc.waiting} pairs already wait in this worker's queue "
                                      f"(--max-queue {batching.max_queue}); retry after {RETRY_AFTER_SECONDS} s."},
                            status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.exception_handler(Closed)
    async def closing(request: Request, exc: Closed):
        return JSONResponse({"error": SHUTTING_DOWN}, status_code=503,
                            headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    async def graded(pairs):
        future = batcher.submit(pairs)  # QueueFull and Closed become 503 above, before any waiting
        metrics.waiting(batcher.waiting)
        return await asyncio.wrap_future(future)

    def readable(path: str, **options):  # load balancers probe with HEAD: it answers like GET, without the body
        return app.api_route(path, methods=["GET", "HEAD"], **options)

    @readable("/healthz")
    def healthz():
        return {"status": "ok", "backend": grader.backend.name, "runtime_version": grader.backend.version,
                "precision": grader.precision, "task": grader.task, "grades": grader.record.get("grades"),
                "model_sha256": grader.graph_sha256, "max_length": grader.max_length,
                "limits": asdict(limits), "batching": asdict(batching), "waiting_pairs": batcher.waiting}

    @app.post("/grade")
    async def grade(request: GradeRequest):
        result = await graded([(p.query, p.title) for p in request.pairs])
        head = {"task": "score"} if grader.task == "score" else {"grades": grader.record["grades"]}
        return JSONResponse({**head, "results": result.rows()})

    @app.post("/rank")
    async def rank(request: RankRequest):
        result = await graded([(request.query, t) for t in request.titles])
        return JSONResponse({"query": request.query, "ranking": ranking(request.titles, result)})

    @readable("/metrics", response_class=PlainTextResponse)
    def metrics_page():
        page = metrics.page()
        if page is None:
            return JSONResponse({"error": MISSING}, status_code=501)
        return Response(page[0], media_type=page[1])

    return app


def app_from_env():
    """App factory for `uvicorn --factory` and several worker processes (settings travel by environment)."""
    from headcut_grader.orphans import exit_with_parent

    exit_with_parent()  # a worker (ours or uvicorn's) of a killed master drains and exits instead of serving on
    settings = Settings.decode(os.environ[ENV_SETTINGS])
    return create_app(settings.grader_dir, threads=settings.threads, limits=settings.limits,
                      batching=settings.batching, backend=settings.backend)
