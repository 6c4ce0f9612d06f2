"""The server's HTTP protocol: uvicorn's own (httptools' parser where installed, else h11's, as uvicorn's "auto"
picks), with a deadline for each request's head. uvicorn has no such timeout: its keep-alive timer runs only
between a response and the next request's first byte (any byte stops it), so a client sending its request line and
headers a byte at a time, or a connection that never sends one, held a worker's connection forever (slow loris).

The deadline runs from the connection's opening, or from the first byte of a kept-alive connection's next request
(from the previous response's end where that request's head began while it was written; the idle wait before it
stays --keep-alive-seconds', as do bytes that begin no request: the rest of a body its app
answered unread, a stray CRLF), to the end of the head; past it, the client gets 408 with one sentence and the
connection is closed (silently when no head had begun). The seconds and the setting's name come from
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
    """The deadline, over either uvicorn protocol: armed at the connection's opening, when a kept-alive
    connection's next request begins, and when a response ends with the next request's head partly in; cancelled
    once the parser has that request's head. Bytes that begin no request (the rest of a body its app answered
    unread, a stray CRLF) leave the connection idle, under uvicorn's keep-alive timer. Each protocol says whether a
    head is partly in (`_head_begun`). Reads what both protocols keep under the same names (loop, transport,
    app_state, the keep-alive timer, and cycle as their own shutdown() reads it); asyncio.Protocol's methods
    wrapped."""

    head_timer = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_head()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # uvicorn's stops its keep-alive timer on any byte
        handed_on = self.transport.is_closing() or self.transport.get_protocol() is not self  # closed, or a websocket
        if handed_on or not self._between_requests():  # or a head came and its request runs
            self._head_complete()
        elif self._head_begun():
            if self.head_timer is None:  # a kept-alive connection's next request begins
                self._arm_head()
        else:  # nothing of a request: idle, as uvicorn's keep-alive timer bounds it (re-armed as uvicorn arms it)
            self._head_complete()
            self._unset_keepalive_if_required()
            self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                self.timeout_keep_alive_handler)

    def connection_lost(self, exc) -> None:
        self._head_complete()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()  # starts a pipelined request whose head is whole, else arms keep-alive
        if self.transport.is_closing() or not self._between_requests() or not self._head_begun():
            return
        # part of the next head came while this response was written: its deadline starts now, not at its next
        # byte (which may never come); the connection is no longer idle, so keep-alive's timer stops, as a byte would
        self._unset_keepalive_if_required()
        if self.head_timer is None:
            self._arm_head()

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm_head(self) -> None:
        seconds, _ = self.app_state.get(HEAD_TIMEOUT, DEFAULT_HEAD_TIMEOUT)
        self.head_timer = self.loop.call_later(seconds, self._head_late)

    def _head_complete(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_late(self) -> None:
        self.head_timer = None
        if self.transport.is_closing():
            return
        if self._head_begun():  # the client is mid-head and gets a 408 to read
            self.transport.write(head_too_slow(*self.app_state.get(HEAD_TIMEOUT, DEFAULT_HEAD_TIMEOUT)))
        self.transport.close()


class H11HeadTimed(_HeadDeadline, H11Protocol):
    def _head_begun(self) -> bool:  # h11 keeps a head's bytes until it has the whole head
        # the buffer's length: Connection.trailing_data copies the buffer, on every packet, so a head sent a byte at
        # a time cost time quadratic in its length
        return self.conn.their_state is h11.IDLE and len(self.conn._receive_buffer) > 0


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # no httptools: uvicorn's "auto" takes h11 too
    HeadTimedProtocol = H11HeadTimed
else:
    class HttpToolsHeadTimed(_HeadDeadline, HttpToolsProtocol):
        begun = False  # httptools' callbacks: a head's first byte came, and its last has not

        def on_message_begin(self) -> None:
            self.begun = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self.begun = False
            self._head_complete()
            super().on_headers_complete()

        def _head_begun(self) -> bool:
            return self.begun

    HeadTimedProtocol = HttpToolsHeadTimed
