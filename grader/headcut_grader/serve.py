"""HTTP JSON API over an exported grader (FastAPI; install with `pip install 'headcut-grader[serve]'`).

POST /grade {"pairs": [{"query": ..., "title": ...}]}, POST /rank {"query": ..., "titles": [...]},
GET /healthz, GET /metrics (Prometheus text, all workers); HEAD too for both. POST bodies are JSON (Content-Type:
application/json, UTF-8). Every request is bounded (body bytes and the
seconds to send them, pairs, characters per text); anything malformed gets
a 4xx with {"error": sentence}, never a 500 or a dead worker (but for HTTP framing uvicorn's parser refuses before
the app runs, such as two Content-Length headers: its plain-text 400, docs/tasks/serve.md). A grader run that
raises (the runtime failing) is logged with its traceback and answers its requests 500 with
{"error": "grading failed: ..."}; the worker serves on.
Concurrent requests share grader runs (headcut_grader.microbatch); a worker whose queue is full answers 503 with
Retry-After at once. A stopping worker (SIGTERM) takes no new connections and answers every request it already
took: with its grades, or with 503 "shutting down" when the drain deadline (--drain-seconds) passes first.
Like the grader, this module never imports torch.
"""

import asyncio
import json
import os
import sys
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, fields, replace

from headcut_grader.errors import UserError, cut, named, setting
from headcut_grader.files import as_path
from headcut_grader.ranges import (BATCH, SERVE_BATCH_SIZE, THREADS, argument, checked_fields, checked_number,
                                   range_field, ranged)
from headcut_grader.serve_middleware import DrainDeadline, Held, JsonBody, Measured
from headcut_grader.validation import MAX_TEXT_CHARS

ENV_SETTINGS = "HEADCUT_SERVE"  # the CLI's settings, read by each worker process
APP_FACTORY = "headcut_grader.serve:app_from_env"  # what uvicorn --factory (and headcut serve's workers) start
# the protocol that enforces header_timeout_seconds: uvicorn's own has no head deadline (uvicorn --http takes it)
HEAD_PROTOCOL = "headcut_grader.serve_protocol:HeadTimedProtocol"
HEAD_TIMEOUT = "headcut_head_timeout"  # lifespan state: (header_timeout_seconds, its name in answers)


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = ranged(1_000_000, 100, 2 ** 30)  # a body is read whole: its memory, times the workers
    max_pairs: int = ranged(256, 1, 65536)  # per request (titles for /rank): one request cannot hold a worker for long
    max_text_chars: int = ranged(2_000, 1, MAX_TEXT_CHARS)  # longer texts are truncated to max_length tokens anyway
    # uvicorn waits for a promised body as long as the client likes: a client sending less than its Content-Length
    # (or dribbling it) held its connection and request forever. An idle timeout, plus a least average rate after
    # it (serve_middleware.MIN_BODY_BYTES_PER_SECOND), so a large body on a slow but steady link still arrives
    body_timeout_seconds: float = ranged(30.0, 0.1, 3600.0)
    # uvicorn has no timeout for a request's head either: a client sending its headers a byte at a time, or a
    # connection sending nothing, was held forever (HEAD_PROTOCOL, which reads it by HEAD_TIMEOUT; without it, as
    # with uvicorn's own protocol, this setting does nothing)
    header_timeout_seconds: float = ranged(30.0, 0.1, 3600.0)
    # bodies are held whole until their requests are answered: this bounds their sum per worker (300 slow clients
    # with 1 MB each would hold 300 MB). Past it a request gets 503 with Retry-After; at least max_body_bytes
    max_held_bytes: int = ranged(64_000_000, 100, 2 ** 40)


@dataclass(frozen=True)
class Batching:
    # benchmarks/serve_load.py: large runs sorted by length into small ORT batches pad least; a 2 ms
    # window gathers the burst of requests that a finished run's answers set off
    max_batch: int = ranged(256, 1, 65536)  # pairs per grader run; whole requests only, so 1 turns merging off
    max_wait_ms: float = ranged(2.0, 0.0, 10_000.0)  # a quiet server waits for company; under load batches fill anyway
    max_queue: int = ranged(512, 1, 10_000_000)  # pairs waiting per worker before new requests get 503
    batch_size: int = range_field(SERVE_BATCH_SIZE, BATCH)  # pairs per runtime call within a run sorted by length


@dataclass(frozen=True)
class Settings:
    grader_dir: str
    threads: int = 1
    limits: Limits = Limits()
    batching: Batching = Batching()
    backend: str = "auto"  # the CLI resolves auto once, so every worker runs the same graph
    # `headcut serve` checked the head deadline's uvicorn and h11 internals (serve_internals.check_uvicorn) before
    # starting its workers, which run the same Python and skip it; a uvicorn --factory start leaves it out and checks
    internals_checked: bool = False

    def encode(self) -> str:
        return json.dumps(asdict(self))

    def checked(self) -> "Settings":
        """These settings with grader_dir, threads and backend checked as $HEADCUT_SERVE's keys, which a person may
        have written for uvicorn --factory; limits and batching are named by their keys already."""
        from headcut_grader.backends import BACKEND_CHOICES

        said = f"{ENV_SETTINGS} key"
        as_path(self.grader_dir, f"{said} grader_dir", what="a grader folder's path")
        threads = checked_number(self.threads, f"{said} threads", THREADS, whole=True)
        if not isinstance(self.backend, str) or self.backend not in BACKEND_CHOICES:
            raise UserError(f"{said} backend is {cut(argument(self.backend))}; use one of: "
                            f"{', '.join(BACKEND_CHOICES)}.")
        return replace(self, threads=threads)

    @classmethod
    def decode(cls, text: str | None) -> "Settings":
        """The settings `encode` wrote, read from $HEADCUT_SERVE (`text`; None: unset), any but grader_dir left at
        their defaults; else one sentence naming the variable and how to set it (was: a KeyError)."""
        try:
            raw = json.loads(text)
            return cls(raw["grader_dir"], raw.get("threads", 1), Limits(**raw.get("limits", {})),
                       Batching(**raw.get("batching", {})), raw.get("backend", "auto"),
                       raw.get("internals_checked") is True).checked()
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            why = f"no key {e}" if isinstance(e, KeyError) else str(e)[:100]
            fact = "is not set" if text is None else f"is not the JSON settings `headcut serve` writes ({why})"
        raise UserError(f"{ENV_SETTINGS} {fact}; start the server with `headcut serve GRADER_DIR`, which sets it for "
                        f"its workers, or set it for uvicorn --factory {APP_FACTORY} --http {HEAD_PROTOCOL} to JSON "
                        f"such as '{{\"grader_dir\": \"runs/grader\"}}'.")


def create_app(grader_dir, *, threads: int = 1, limits: Limits = Limits(), batching: Batching = Batching(),
               backend: str = "auto", flags: bool = False):
    """The FastAPI app for one grader folder (one Grader and one micro-batcher per worker process, in
    `app.state`, which the handlers of headcut_grader.serve_routes read). Its answers name a limit a request
    passes as the field (limits.max_pairs=256), or with `flags` as `headcut serve`'s flag (--max-pairs 256).
    limits.header_timeout_seconds holds only where uvicorn runs it with http=HEAD_PROTOCOL (headcut serve does)."""
    from fastapi import FastAPI

    from headcut_grader.grader import Grader
    from headcut_grader.serve_metrics import make_metrics
    from headcut_grader.serve_routes import BODY_ROUTES, add_error_handlers, add_routes

    as_path(grader_dir, "create_app grader_dir", what="a grader folder's path")
    limits, batching = check_serving(limits, batching)  # the CLI checked them already, naming its flags
    app = FastAPI(title="headcut grader", version="1", lifespan=_lifespan)
    state = app.state
    state.grader = Grader(grader_dir, threads=threads, batch_size=batching.batch_size, backend=backend,
                          names="flags" if flags else "arguments")
    state.metrics = make_metrics()
    state.batcher = _batcher(state.grader.grade, state.metrics, batching)
    state.limits, state.batching, state.said = limits, batching, _said(limits, batching, flags)
    state.held = Held(limits.max_held_bytes)  # JsonBody counts the bodies held in it, /healthz shows them
    state.head_timeout = (limits.header_timeout_seconds, _name("limits", "header_timeout_seconds", flags))
    app.add_middleware(JsonBody, limit=limits.max_body_bytes, max_text_chars=limits.max_text_chars, paths=BODY_ROUTES,
                       timeout=limits.body_timeout_seconds,
                       names=tuple(_name("limits", name, flags) for name in JsonBody.SETTINGS),
                       held=state.held, held_said=state.said["max_held_bytes"])
    # outside JsonBody: a body still arriving at the drain deadline gets 503 too (was: a 500 and a traceback);
    # inside Measured, which then counts its 503s
    app.add_middleware(DrainDeadline)
    app.add_middleware(Measured, metrics=state.metrics)  # added last: outermost, so it sees 413s, 415s and 400s too
    add_error_handlers(app)
    add_routes(app, limits)
    return app


def check_serving(limits: Limits, batching: Batching, *, flags: bool = False) -> tuple[Limits, Batching]:
    """`limits` and `batching` with whole numbers as plain ints, after checking each field's type and range and
    that a request of max_pairs pairs fits the queue (else it would get 503 "retry" forever). `flags`: name the
    settings as `headcut serve`'s flags (--max-queue), not as the fields (batching.max_queue)."""
    checked = []
    for group, given, cls in (("limits", limits, Limits), ("batching", batching, Batching)):
        checked.append(checked_fields(given, cls, lambda name, group=group: _name(group, name, flags) if name
                                      else group))
    limits, batching = checked
    if limits.max_held_bytes < limits.max_body_bytes:
        held, body = _name("limits", "max_held_bytes", flags), _name("limits", "max_body_bytes", flags)
        raise UserError(f"{setting(held, limits.max_held_bytes)} is below {setting(body, limits.max_body_bytes)}, so "
                        f"a body of {body} could never be held; raise {held} or lower {body}.")
    if batching.max_queue < limits.max_pairs:
        queue, pairs = _name("batching", "max_queue", flags), _name("limits", "max_pairs", flags)
        raise UserError(f"{setting(queue, batching.max_queue)} is below {setting(pairs, limits.max_pairs)}, so a "
                        f"request of {pairs} pairs could never be queued; raise {queue} or lower {pairs}.")
    return limits, batching


def _name(group: str, field: str, flags: bool) -> str:
    """A serving setting as an answer names it, by the one naming rule (headcut_grader.errors.named): create_app's
    field under its group (limits.max_pairs), or with `flags` `headcut serve`'s flag (--max-pairs)."""
    return named(field, "flags" if flags else "keys", section=group)


def _said(limits: Limits, batching: Batching, flags: bool) -> dict[str, str]:
    """Each setting and its value as the app's answers name them: `limits.max_pairs=256`, or `--max-pairs 256` for
    an app `headcut serve` made."""
    return {f.name: setting(_name(group, f.name, flags), getattr(given, f.name))
            for group, given in (("limits", limits), ("batching", batching)) for f in fields(given)}


def _batcher(grade, metrics, batching: Batching):
    """The worker's micro-batcher; each finished run updates the batch metrics, each change of its queue the
    queue gauge (a request queued, or taken into a run, whether the run then succeeds or fails)."""
    from headcut_grader.microbatch import Batcher

    return Batcher(grade, max_batch=batching.max_batch, max_wait=batching.max_wait_ms / 1000,
                   max_queue=batching.max_queue, on_batch=metrics.batch, on_waiting=metrics.waiting)


@asynccontextmanager
async def _lifespan(app):
    yield {HEAD_TIMEOUT: app.state.head_timeout}  # lifespan state, which uvicorn hands each connection's protocol
    # uvicorn gets here once every request it took was answered (by DrainDeadline when its graceful
    # timeout passed): only a run already started may be left, and the event loop must not block on it
    await asyncio.to_thread(app.state.batcher.close, timeout=60)
    app.state.metrics.close()


def app_from_env():
    """App factory for `uvicorn --factory` (with `--http` HEAD_PROTOCOL) and several worker processes (settings
    travel by environment, where `headcut serve` put them: answers name its flags). The head deadline's uvicorn and
    h11 internals are checked at start-up, not in the middle of a request: here, unless `headcut serve` did.
    uvicorn calls it as a command's body is called, so it ends as a command does: a UserError (HEADCUT_SERVE unset,
    a missing grader folder) is its sentence on stderr and exit code 2 (uvicorn catches only a factory's
    TypeError)."""
    try:
        return _app_from(os.environ.get(ENV_SETTINGS))
    except UserError as e:
        sys.stderr.write(f"error: {e}\n")  # as cli.common.user_errors says it, which would import typer here
        raise SystemExit(2) from None


def _app_from(text: str | None):
    from headcut_grader.orphans import exit_with_parent
    from headcut_grader.serve_internals import check_uvicorn  # imports uvicorn, which runs this

    settings = Settings.decode(text)
    if not settings.internals_checked:
        check_uvicorn()
    exit_with_parent()  # a worker (ours or uvicorn's) of a killed master drains and exits instead of serving on
    return create_app(settings.grader_dir, threads=settings.threads, limits=settings.limits, flags=True,
                      batching=settings.batching, backend=settings.backend)
