"""The server's ASGI middleware: what a request body must be (JsonBody), answering requests the drain deadline cuts
off (DrainDeadline), and timing and counting every response (Measured). Plain ASGI, no framework imports.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from contextlib import contextmanager

from headcut_grader.errors import counted, cut

RETRY_AFTER_SECONDS = 1
SHUTTING_DOWN = f"server shutting down; retry after {RETRY_AFTER_SECONDS} s."
# after its first body_timeout_seconds a body must average this many bytes per second: a client that sends a byte
# just before each idle timeout would otherwise hold its connection as long as it likes (slow loris), while a
# large body on a steady link is never cut off (a whole-body deadline of 30 s needed 36 MB/s for 1 GiB)
MIN_BODY_BYTES_PER_SECOND = 32_768


class JsonBody:
    """ASGI middleware: a POST body to one of `paths` must be JSON text (Content-Type application/json, UTF-8, nested
    less deeply than the parser's recursion limit) of at most `limit` bytes, also when no Content-Length is sent,
    never idle for `timeout` seconds and, after its first `timeout` seconds, arriving at MIN_BODY_BYTES_PER_SECOND
    on average (_read_body). Anything else is answered here with one sentence (413, 415, 400 or 408), before
    FastAPI's parser could answer in its own words or fail; JSON that does not fit the request shape is left to the
    route's 422. `names`: the SETTINGS as the answer names them (the app's fields or `headcut serve`'s flags)."""

    SETTINGS = ("max_body_bytes", "max_text_chars", "body_timeout_seconds")

    def __init__(self, app, limit: int, max_text_chars: int, paths: tuple[str, ...], timeout: float,
                 names: tuple[str, ...] = tuple(f"limits.{name}" for name in SETTINGS), *, held: Held | None = None,
                 held_said: str = "limits.max_held_bytes"):
        self.app, self.limit, self.max_text_chars, self.paths, self.names = app, limit, max_text_chars, paths, names
        self.timeout, self.held, self.held_said = timeout, held or Held(math.inf), held_said

    async def __call__(self, scope, receive, send):
        # only a route that reads a body: any other POST gets the router's 404 or 405, whatever its body
        if scope["type"] != "http" or scope["method"] != "POST" or scope.get("path") not in self.paths:
            return await self.app(scope, receive, send)
        # an answer given before the body was read whole closes the connection: else the rest of the body, which may
        # still come (a Content-Length of any size), is read after the answer on a connection kept for reuse
        headers = header_values(scope)
        problem = self.header_problem(headers)
        if problem:
            return await _send_json(send, *problem, close=True)
        with self.held.request() as take:  # the body's bytes count until its request is answered
            try:
                body = await _read_body(receive, self.limit, self.timeout, take)
            except BodyTooSlow as late:
                return await _send_json(send, *self.too_slow(late), close=True)
            except HeldFull:
                return await _send_json(send, 503, self.busy(), retry_after=True, close=True)
            if body is None:  # the client went away mid-body: nobody to answer
                return
            if len(body) > self.limit:  # read only until past the limit
                return await _send_json(send, *self.too_large(), close=True)
            lost = self.lost_to_upgrade(headers, body)
            if lost:  # the connection's bytes went astray: close it
                return await _send_json(send, *lost, close=True)
            problem = body_problem(body)
            if problem:
                return await _send_json(send, *problem)
            await self.app(scope, _replay(body, receive), send)

    def header_problem(self, headers: dict[bytes, list[bytes]]) -> tuple[int, str] | None:
        """Why the headers that say how the body is written refuse it, or None. `headers`: every value of each, as
        header_values gives them, so a repeated header is read by all its lines (FastAPI reads the first) and every
        coding of a list or a second header counts."""
        if any(not value.isdigit() or int(value) > self.limit for value in headers.get(b"content-length", [])):
            return self.too_large()
        media_types = sorted({value.split(b";")[0].strip().lower() for value in headers.get(b"content-type", [])})
        if len(media_types) > 1:
            shown = ", ".join(_shown(media_type) for media_type in media_types)
            return 400, (f"request has {len(media_types)} Content-Type headers that disagree ({shown}); send one: "
                         "Content-Type: application/json.")
        if media_types != [b"application/json"]:  # an empty header is told from none
            shown = (_shown(media_types[0]) or "empty") if media_types else "none"
            return 415, f"request body must be JSON (Content-Type {shown}): send Content-Type: application/json."
        for name, plain, fix in (("Content-Encoding", (b"identity", b""), "without a Content-Encoding header"),
                                 ("Transfer-Encoding", (b"chunked",), "with a Content-Length or Transfer-Encoding: "
                                  "chunked alone")):
            if set(_tokens(headers, name)) - set(plain):
                return 415, (f"request body has {name} {_shown(b', '.join(_tokens(headers, name)))}, which this "
                             f"server does not decode: send the JSON uncompressed, {fix}.")
        return None

    @staticmethod
    def lost_to_upgrade(headers: dict[bytes, list[bytes]], body: bytes) -> tuple[int, str] | None:
        """The answer to a request that declared a body but brought none, having asked to switch protocols: httptools
        (uvicorn's parser) hands the bytes after such a head to the switch, which uvicorn then refuses (it upgrades
        websockets only), so `curl --http2 -d` (Upgrade: h2c) was answered 'the request body is empty'. h11 reads
        the body, which is then served."""
        declared = any(value.strip(b"0") for value in headers.get(b"content-length", [])) or _tokens(
            headers, "Transfer-Encoding")
        upgrade = _tokens(headers, "Upgrade")
        if body or not declared or not upgrade or b"upgrade" not in _tokens(headers, "Connection"):
            return None
        return 400, (f"request asks to switch protocols (Upgrade: {_shown(b', '.join(upgrade))}), which this server "
                     "does not do, and the switch took its body; send it without the Upgrade header (curl: "
                     "--http1.1).")

    def busy(self) -> str:
        return (f"server busy: this worker holds {counted(self.held.bytes, 'byte')} of request bodies already "
                f"({self.held_said}); retry after {RETRY_AFTER_SECONDS} s.")

    def too_large(self) -> tuple[int, str]:
        body, text, _ = self.names
        return 413, (f"request body over {counted(self.limit, 'byte')} (the server's {body}); send fewer pairs per "
                     f"request, each text at most {self.max_text_chars} characters ({text}).")

    def too_slow(self, late: BodyTooSlow) -> tuple[int, str]:
        said = f"{self.timeout:g} s, the server's {self.names[2]}"
        if late.stalled:
            return 408, (f"request body stalled: no bytes came for {said}; send the whole body without pausing, "
                         "with a Content-Length that matches it.")
        return 408, (f"request body too slow: {counted(late.size, 'byte')} in {shown_seconds(late.seconds)} s, "
                     f"under the {MIN_BODY_BYTES_PER_SECOND} bytes/s a body must average after its first {said}; send "
                     "it faster, without pausing and with a Content-Length that matches it, or fewer pairs per "
                     "request.")


def _shown(value: bytes) -> str:
    return cut(value.decode("latin-1"))  # header values are Latin-1 text


def _tokens(headers: dict[bytes, list[bytes]], name: str) -> list[bytes]:
    """The comma-separated items of every line of header `name`, lower-case (Content-Encoding: gzip, identity); an
    empty item is none ('Transfer-Encoding: chunked,' is chunked, as HTTP's list rule reads it)."""
    return [token for value in headers.get(name.lower().encode(), []) for item in value.split(b",")
            if (token := item.strip().lower())]


def header_values(scope) -> dict[bytes, list[bytes]]:
    """Each request header's values in the order sent, by lower-case name (ASGI keeps a repeated header's lines)."""
    values: dict[bytes, list[bytes]] = {}
    for name, value in scope.get("headers") or []:
        values.setdefault(name.lower(), []).append(value)
    return values


def shown_seconds(seconds: float) -> str:
    """`seconds` for an answer: to 0.1 s, and to two significant figures below 1 s (0.1, 0.05, 2.4, 120.3); was to the
    whole second, so a body refused at --body-timeout-seconds 0.1 came 'in 0 s'."""
    if seconds <= 0:
        return "0"
    return f"{round(seconds, max(1, 1 - math.floor(math.log10(seconds)))):g}"


def body_problem(body: bytes) -> tuple[int, str] | None:
    """Why `body` is not JSON text the request models can read, or None (including for malformed JSON, which
    the route answers 422 like any other shape it cannot use). FastAPI parses the body again: at most
    max_body_bytes, a few milliseconds per megabyte."""
    from headcut_grader.errors import UserError
    from headcut_grader.readers import unique_keys

    try:
        json.loads(body.decode("utf-8"), object_pairs_hook=unique_keys("request body: an object"))
    except UserError as e:  # a key named twice, which the parser would settle by keeping the last value
        return 400, str(e)
    except UnicodeDecodeError as e:
        return 400, f"request body is not UTF-8 (byte {e.start}); send the JSON encoded as UTF-8."
    except RecursionError:
        return 400, "request body is JSON nested too deeply; send the request shape GET /docs shows."
    except ValueError:
        pass
    return None


class BodyTooSlow(Exception):
    """A body that stalled (no bytes for the idle timeout) or came too slowly: `size` bytes in `seconds`."""

    def __init__(self, *, stalled: bool, size: int, seconds: float):
        super().__init__(stalled, size, seconds)
        self.stalled, self.size, self.seconds = stalled, size, seconds


class HeldFull(Exception):
    """A body's next bytes would take the worker's held bodies past Held.limit."""


class Held:
    """The bytes of request bodies a worker holds (arriving, or their requests not yet answered), at most `limit`."""

    def __init__(self, limit: float):
        self.limit, self.bytes = limit, 0

    @contextmanager
    def request(self):
        """A `take(n)` for one request: counts its next `n` bytes, or False where they would pass the limit; every
        byte it took is given back when the request ends (answered, refused or its client gone)."""
        taken = 0

        def take(n: int) -> bool:
            nonlocal taken
            if self.bytes + n > self.limit:
                return False
            self.bytes, taken = self.bytes + n, taken + n
            return True

        try:
            yield take
        finally:
            self.bytes -= taken


async def _read_body(receive, limit: int, timeout: float, take=lambda n: True) -> bytes | None:
    """The whole body, or None if the client disconnected; stops reading once more than `limit` bytes came.
    Raises BodyTooSlow when no bytes come for `timeout` seconds (stalled), or when the body is due later than
    `timeout` seconds plus a second per MIN_BODY_BYTES_PER_SECOND bytes received (too slow: a bound that grows with
    the body, so a large body on a steady link is never cut off, and a trickle is). Each wait for the next chunk ends
    at whichever comes first, so a trickle is refused at its rate deadline. Was: a wait begun in the first `timeout`
    seconds ended only by the idle timeout, so a client sending a few bytes just before it held its connection up to
    a whole idle timeout past its rate deadline."""
    chunks, size, more = [], 0, True
    start = last = time.monotonic()
    while more and size <= limit:
        idle, due = last + timeout, start + timeout + size / MIN_BODY_BYTES_PER_SECOND
        try:
            message = await asyncio.wait_for(receive(), min(idle, due) - time.monotonic())
        except asyncio.TimeoutError:  # stalled when the idle timeout ended the wait: no bytes for `timeout` seconds
            raise BodyTooSlow(stalled=idle <= due, size=size, seconds=time.monotonic() - start) from None
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        size, last = size + len(chunks[-1]), time.monotonic()
        # `take`: Held.request's, for the worker's bound on bodies held; a body past `limit` is the caller's 413,
        # not a busy worker's 503 (max_held_bytes may equal max_body_bytes)
        if size <= limit and not take(len(chunks[-1])):
            raise HeldFull()
        more = message.get("more_body", False)
    return b"".join(chunks)


def _replay(body: bytes, receive):
    """A `receive` that hands the app the body already read, then whatever the connection sends next."""
    sent = False

    async def replayed():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


class DrainDeadline:
    """ASGI middleware: when the drain deadline passes, uvicorn cancels every request still running, and would
    answer each with a 500 and a logged traceback; a request cancelled before its answer started (its body still
    arriving, or its grades being computed, which are dropped) gets 503 "shutting down" with Retry-After instead."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def sending(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:  # only uvicorn's drain deadline cancels a request: answer, then end quietly
            if not started:
                await _send_json(send, 503, SHUTTING_DOWN, retry_after=True)


async def _send_json(send, status: int, message: str, *, retry_after: bool = False, close: bool = False):
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if retry_after:
        headers.append((b"retry-after", str(RETRY_AFTER_SECONDS).encode()))
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Measured:
    """ASGI middleware: time and count every response by route template, method and status (413s included)."""

    METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # the route's template, never the raw path (nor an invented method): series stay bounded
            path = getattr(scope.get("route"), "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in self.METHODS else "other"
            self.metrics.request(path, method, status, time.perf_counter() - start)
