"""The HTTP side of `serve`: request bodies bounded by the limits, the route handlers and the error answers.

Handlers read the worker's grader, micro-batcher, metrics and settings from `app.state` (set by
serve.create_app). This module imports FastAPI (the `serve` extra), so serve.py imports it only to build an app.
"""
# No `from __future__ import annotations`: FastAPI reads the handlers' annotations as types.

import asyncio
import functools
import inspect
import logging
from dataclasses import asdict
from typing import Annotated

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from headcut_grader.data import text_problem
from headcut_grader.errors import quoted
from headcut_grader.grader import ranking
from headcut_grader.microbatch import Closed, QueueFull
from headcut_grader.serve_middleware import RETRY_AFTER_SECONDS, SHUTTING_DOWN
from headcut_grader.tokens import NoTokens

log = logging.getLogger(__name__)


def request_models(limits) -> tuple[type, type]:
    """The /grade and /rank bodies, bounded by `limits` (a serve.Limits): built per app, since the bounds are
    part of the types that FastAPI validates and shows at /docs."""

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

    return GradeRequest, RankRequest


# --- routes ---------------------------------------------------------------------------------------

def healthz(request: Request):
    state = request.app.state
    grader = state.grader
    return {"status": "ok", "backend": grader.backend.name, "runtime_version": grader.backend.version,
            "precision": grader.precision, "task": grader.task, "grades": grader.record.get("grades"),
            "model_sha256": grader.graph_sha256, "max_length": grader.max_length,
            "limits": asdict(state.limits), "batching": asdict(state.batching), "waiting_pairs": state.batcher.waiting,
            "held_body_bytes": state.held.bytes}


async def grade(request: Request, body):  # body: this app's GradeRequest (see add_routes)
    result = await _graded(request, [(p.query, p.title) for p in body.pairs], lambda i, side: f"pairs.{i}.{side}")
    if isinstance(result, JSONResponse):
        return result
    grader = request.app.state.grader
    head = {"task": "score"} if grader.task == "score" else {"grades": grader.record["grades"]}
    return JSONResponse({**head, "results": result.rows()})


async def rank(request: Request, body):  # body: this app's RankRequest
    result = await _graded(request, [(body.query, t) for t in body.titles],
                           lambda i, side: "query" if side == "query" else f"titles.{i}")
    if isinstance(result, JSONResponse):
        return result
    return JSONResponse({"query": body.query, "ranking": ranking(body.titles, result)})


def _tokenless(e: NoTokens, place) -> JSONResponse:
    """422 for the request's text that the grader's tokenizer reduced to no tokens, at its JSON place (`place(index,
    side)`), said as the other empty texts are. The batch found it: the batcher refuses that request alone."""
    return JSONResponse({"error": f"{place(e.index, e.side)}: {e.problem}; see GET /docs for the request shape."},
                        status_code=422)


def metrics_page(request: Request):
    metrics = request.app.state.metrics
    page = metrics.page()
    if page is None:  # NoMetrics: why
        return JSONResponse({"error": metrics.said}, status_code=501)
    return Response(page[0], media_type=page[1])


class GradingFailed(Exception):
    """The grader run that held this request raised (its exception is the cause); answered 500 below."""


async def _graded(request: Request, pairs, place):
    """The request's Grades, or the 422 for its text of no tokens (at `place(index, side)`)."""
    future = request.app.state.batcher.submit(pairs)  # QueueFull and Closed become 503 (below), before any waiting
    try:
        return await asyncio.wrap_future(future)
    except NoTokens as e:
        return _tokenless(e, place)
    except Exception as e:  # the batcher lives on: the next run may succeed
        raise GradingFailed() from e


BODY_ROUTES = ("/grade", "/rank")  # the routes that read a JSON body (serve_middleware.JsonBody checks it first)


def add_routes(app: FastAPI, limits) -> None:
    """GET|HEAD /healthz, POST /grade and /rank (bodies bounded by `limits`), GET|HEAD /metrics."""
    grade_request, rank_request = request_models(limits)
    _add_readable(app, "/healthz", healthz)
    for path, handler, model in zip(BODY_ROUTES, (grade, rank), (grade_request, rank_request)):
        app.add_api_route(path, _with_body(handler, model), methods=["POST"])
    _add_readable(app, "/metrics", metrics_page, response_class=PlainTextResponse)


def _add_readable(app: FastAPI, path: str, handler, **options) -> None:
    """GET and HEAD `path` (load balancers probe with HEAD: it answers like GET, without the body). One route
    answers both, so a POST's 405 allows both; the API page lists a GET-only twin that the first shadows, since a
    route listing both gives the two operations one id (FastAPI warns "Duplicate Operation ID")."""
    app.add_api_route(path, handler, methods=["GET", "HEAD"], include_in_schema=False, **options)
    app.add_api_route(path, handler, methods=["GET"], **options)


def _with_body(handler, model):
    """`handler` as FastAPI reads it: the same function, its `body` parameter typed as `model` (per app)."""

    @functools.wraps(handler)
    async def endpoint(**values):
        return await handler(**values)

    signature = inspect.signature(handler)
    endpoint.__signature__ = signature.replace(parameters=[
        p.replace(annotation=model) if p.name == "body" else p for p in signature.parameters.values()])
    return endpoint


# --- error answers: {"error": sentence}, never a bare 500 ---------------------------------------------

ROUTES = "POST /grade, POST /rank, GET /healthz, GET /metrics and GET /docs"


async def http_error(request: Request, exc: StarletteHTTPException):
    """The framework's own refusals as sentences: an unknown route, a wrong method (with its Allow header), a
    body the JSON parser gave up on."""
    path, headers = request.url.path, getattr(exc, "headers", None)
    # the path quoted and cut, as the user's keys are: a 60,000-character path was echoed whole, and one with an
    # invisible character (/grade%E2%80%8B) read as a route that exists
    message = {404: f"no route {quoted(path)}; the routes are {ROUTES}",
               405: f"{quoted(path)} takes {(headers or {}).get('Allow', 'another method')}, not {request.method}; "
                    "see GET /docs",
               400: "body could not be read as JSON (a number too long to read?); see GET /docs for the request "
                    "shape" if exc.detail == "There was an error parsing the body" else None}.get(exc.status_code)
    return JSONResponse({"error": f"{message}." if message else str(exc.detail)}, status_code=exc.status_code,
                        headers=headers)


PAIR_SHAPE = '{"query": TEXT, "title": TEXT}'
SHAPES = {"/grade": f'{{"pairs": [{PAIR_SHAPE}, ...]}}', "/rank": '{"query": TEXT, "titles": [TEXT, ...]}'}
_JSON_KINDS = {type(None): "null", bool: "true or false", int: "a number", float: "a number", str: "text",
               list: "an array", dict: "an object"}


async def invalid(request: Request, exc: RequestValidationError):
    first = exc.errors()[0] if exc.errors() else {}
    kind = first.get("type", "")
    parts = [p for p in first.get("loc", ()) if p != "body"]
    if kind == "extra_forbidden" and parts:  # the one part the user named: quoted, so ' pairs' or a NUL shows; cut
        parts[-1] = quoted(parts[-1][:40]) + ("..." if len(parts[-1]) > 40 else "")
    where = ".".join(map(str, parts)) or "body"
    message = ("body is not valid JSON" if kind == "json_invalid" else
               "the request body is empty; send a JSON object" if (where, kind) == ("body", "missing") else
               f"{where}: {_shape_problem(first, where, request)}")
    return JSONResponse({"error": f"{message}; see GET /docs for the request shape."}, status_code=422)


def _shape_problem(error: dict, where: str, request: Request) -> str:
    """What is wrong with the field at `where`, as pydantic's `error` found it, in the server's words: what the
    field must be, or the limit (the server's flag) it passes."""
    kind, value, ctx = error.get("type", ""), error.get("input"), error.get("ctx") or {}
    path, state = request.url.path, request.app.state
    got = _JSON_KINDS.get(type(value), type(value).__name__)
    is_pair = where.startswith("pairs.")
    if kind in ("model_attributes_type", "model_type", "dict_type"):
        return f"must be an object {PAIR_SHAPE if is_pair else SHAPES.get(path, '')}, not {got}"
    if kind == "list_type":
        return f"must be an array, not {got}"
    if kind in ("string_type", "string_unicode"):
        problem = text_problem(value) if isinstance(value, str) else None
        if problem and (where == "body" or is_pair and where.count(".") == 1):  # an object's key, not a text field:
            return f"key {quoted(value)} has a {problem}"  # pydantic names the object that holds it
        return problem or f"must be text (a JSON string), not {got}"
    if kind == "too_long":  # a list's; a text's is string_too_long
        return (f"{len(value)} items, more than this server's {state.said['max_pairs']}; send at most "
                f"{state.limits.max_pairs} per request")
    if kind == "too_short":
        return "an empty array; send at least one"
    if kind == "string_too_long":
        return f"{len(value)} characters, more than this server's {state.said['max_text_chars']}; shorten it"
    if kind == "string_too_short":
        return "empty text"
    if kind == "value_error":  # the text rule of request_models.checked
        return str(ctx.get("error", error.get("msg", "invalid")))
    if kind == "extra_forbidden":
        return f"not a field of {path}, which takes {PAIR_SHAPE if is_pair else SHAPES.get(path, 'no such field')}"
    if kind == "missing":
        return f"missing; each pair is {PAIR_SHAPE}" if is_pair else f"missing; {path} takes {SHAPES.get(path, '')}"
    return error.get("msg", "invalid")


async def busy(request: Request, exc: QueueFull):
    return JSONResponse({"error": f"server busy: {exc.waiting} pairs already wait in this worker's queue "
                                  f"({request.app.state.said['max_queue']}); retry after {RETRY_AFTER_SECONDS} s."},
                        status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def closing(request: Request, exc: Closed):
    return JSONResponse({"error": SHUTTING_DOWN}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})


async def failed(request: Request, exc: GradingFailed):
    """A grader run that raised: logged with its traceback, answered 500 with the cause; the worker serves on."""
    log.error("grading failed for %s %s", request.method, request.url.path, exc_info=exc.__cause__)
    return JSONResponse({"error": f"grading failed: {_cause(exc.__cause__)}; these pairs were not graded and the "
                                  "server logged the error; retry, and if it fails again see the server's log."},
                        status_code=500)


async def internal(request: Request, exc: Exception):
    """Any other exception (a bug): 500 with a sentence instead of plain text; Starlette re-raises it after, and
    uvicorn logs it with its traceback."""
    return JSONResponse({"error": f"internal error: {_cause(exc)}; the server logged it; retry, and if it fails "
                                  "again see the server's log."}, status_code=500)


def _cause(exc: BaseException) -> str:
    """An exception in a few words for an answer: its type and the first line of its message, at most 200
    characters (a runtime's message can run to pages)."""
    lines = str(exc).strip().splitlines()
    text = lines[0].rstrip(".") if lines else ""
    text = text if len(text) <= 200 else text[:199] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def add_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(GradingFailed, failed)
    app.add_exception_handler(Exception, internal)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(QueueFull, busy)
    app.add_exception_handler(Closed, closing)
