"""The server's HTTP protocol: uvicorn's own (httptools' parser where installed, else h11's, as uvicorn's "auto"
picks), with a deadline for each request's head. uvicorn has no such timeout: its keep-alive timer runs only
between a response and the next request's first byte (any byte stops it), so a client sending its request line and
headers a byte at a time, or a connection that never sends one, held a worker's connection forever (slow loris).

The deadline runs from the connection's opening, or from a kept-alive connection's first byte after an answer (the
idle wait before it stays --keep-alive-seconds'), to the end of the head; past it, the client gets 408 with one
sentence and the connection is closed (silently when it sent nothing). The seconds and the setting's name come from
the app's lifespan state (HEAD_TIMEOUT, which serve.create_app's lifespan publishes), so one declaration,
Limits.header_timeout_seconds, sets it. uvicorn takes the class as Config(http=HeadTimedProtocol).
"""
from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from headcut_grader.serve import HEAD_TIMEOUT, Limits

# an app that publishes no deadline (another app, or lifespan off): Limits' default, named as create_app's field
DEFAULT_HEAD_TIMEOUT = (Limits().header_timeout_seconds, "limits.header_timeout_seconds")


def head_too_slow(seconds: float, name: str) -> bytes:
    """The whole 408 answer to a head not complete within `seconds` (`name`: the setting), closing the connection."""
    body = json.dumps({"error": f"request head not complete within {seconds:g} s, the server's {name}; send the "
                                "request line and headers without pausing."}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(body), body))


class _HeadDeadline:
    """The deadline, over either uvicorn protocol: armed when a head is awaited, cancelled by `_head_complete`, which
    each protocol calls once its parser has the whole head. Reads what both protocols keep under the same names
    (loop, transport, app_state, and cycle as their own shutdown() reads it); asyncio.Protocol's methods wrapped."""

    head_timer = None
    heard = False  # bytes came since the deadline was armed: the client is mid-head and gets a 408 to read

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        if self.head_timer is None and self._between_requests():  # a kept-alive connection's next request begins
            self._arm_head()
        self.heard = True
        super().data_received(data)

    def connection_lost(self, exc) -> None:
        self._head_complete()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_head(self) -> None:
        seconds, _ = self.app_state.get(HEAD_TIMEOUT, DEFAULT_HEAD_TIMEOUT)
        self.heard = False
        self.head_timer = self.loop.call_later(seconds, self._head_late)

    def _head_complete(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_late(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if not self._between_requests():  # a pipelined head behind a request being answered: close after the answer
            self.cycle.keep_alive = False
            return
        if self.heard:
            self.transport.write(head_too_slow(*self.app_state.get(HEAD_TIMEOUT, DEFAULT_HEAD_TIMEOUT)))
        self.transport.close()


class H11HeadTimed(_HeadDeadline, H11Protocol):
    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # h11 parsed a request's head: it awaits its body or its answer
            self._head_complete()


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: uvicorn's "auto" takes h11 too
    HeadTimedProtocol = H11HeadTimed
else:
    class HttpToolsHeadTimed(_HeadDeadline, HttpToolsProtocol):
        def on_headers_complete(self) -> None:  # httptools' callback: the parser has the whole head
            self._head_complete()
            super().on_headers_complete()

    HeadTimedProtocol = HttpToolsHeadTimed
