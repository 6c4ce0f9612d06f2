"""Dynamic micro-batching for the server: concurrent requests share one grader run.

A request's pairs wait in a bounded queue; one thread per worker takes whole requests, oldest first, until
the batch holds `max_batch` pairs or the oldest has waited `max_wait` seconds, grades them in one
`Grader.grade` call and hands each request its own rows back. A request is never split, so one larger
than `max_batch` runs alone (`max_batch=1` turns merging off). When the queue already holds `max_queue`
pairs, `submit` raises `QueueFull` at once: the caller answers 503 instead of letting latency grow. A request
whose future is cancelled while it waits is dropped, never graded. A run that finds a text the tokenizer keeps
nothing of (NoTokens) fails that request alone, at its own pair; the others are graded again without it.
`waiting` counts the pairs queued and not yet taken into a run; `on_waiting` hears each new count as it changes
(the server's queue gauge), whatever the runs do. Torch-free, like the grader.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Sequence

from headcut_grader.grader import Grades
from headcut_grader.ranges import check_callbacks
from headcut_grader.tokens import NoTokens


class QueueFull(Exception):
    """The queue holds too many pairs to take this request now; `waiting` pairs are ahead of it."""

    def __init__(self, waiting: int):
        super().__init__(f"{waiting} pairs waiting")
        self.waiting = waiting


class Closed(Exception):
    """The batcher is shutting down and takes no new requests."""


@dataclass
class _Job:
    pairs: Sequence[tuple[str, str]]
    future: Future = field(default_factory=Future)
    arrived: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class BatchStats:
    """One grader run: how many requests and pairs it merged and how long grading took."""

    requests: int
    pairs: int
    seconds: float


def split(result: Grades, sizes: Sequence[int]) -> list[Grades]:
    """Rows of one merged result, cut back into consecutive pieces of the given sizes."""
    out, start = [], 0
    for n in sizes:
        rows = slice(start, start + n)
        out.append(result.take(rows))
        start += n
    return out


class Batcher:
    """`future = batcher.submit(pairs)`; `future.result()` is the request's Grades."""

    def __init__(self, grade: Callable[[list[tuple[str, str]]], Grades], *, max_batch: int, max_wait: float,
                 max_queue: int, on_batch: Callable[[BatchStats], None] | None = None,
                 on_waiting: Callable[[int], None] | None = None):
        check_callbacks("Batcher", on_batch=on_batch, on_waiting=on_waiting)
        self._grade, self._on_batch, self._on_waiting = grade, on_batch, on_waiting
        self.max_batch, self.max_wait, self.max_queue = max_batch, max_wait, max_queue
        self._jobs: deque[_Job] = deque()
        self._waiting = 0  # pairs queued and not yet taken into a batch
        self._closed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="headcut-batcher", daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._waiting

    def submit(self, pairs: Sequence[tuple[str, str]]) -> Future:
        job = _Job(pairs)
        with self._wake:
            if self._closed:
                raise Closed()
            if self._waiting + len(pairs) > self.max_queue:
                raise QueueFull(self._waiting)
            self._jobs.append(job)
            self._count(len(pairs))
            self._wake.notify()
        return job.future

    def close(self, *, timeout: float | None = None) -> None:
        """Take no new requests, grade every queued one, then stop the thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)

    def _count(self, pairs: int) -> None:
        # called holding the lock, so the reports reach on_waiting in the order the count changed
        self._waiting += pairs
        if self._on_waiting:
            self._on_waiting(self._waiting)

    def _next_batch(self) -> list[_Job] | None:
        with self._wake:
            while not self._jobs and not self._closed:
                self._wake.wait()
            if not self._jobs:
                return None
            # The window runs from the oldest request's arrival: under load the queue filled while the
            # previous batch ran, so the next one starts at once; only a quiet server waits.
            deadline = self._jobs[0].arrived + self.max_wait
            while self._waiting < self.max_batch and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.wait(left)
            batch, size = [], 0
            while self._jobs and (not batch or size + len(self._jobs[0].pairs) <= self.max_batch):
                job = self._jobs.popleft()
                self._count(-len(job.pairs))
                # a running future can no longer be cancelled, so setting its result below cannot fail;
                # False: the request was cancelled while it waited (the server's drain deadline), so skip it
                if job.future.set_running_or_notify_cancel():
                    batch.append(job)
                    size += len(job.pairs)
            return batch

    def _loop(self) -> None:
        while (batch := self._next_batch()) is not None:
            if not batch:  # every request taken was cancelled
                continue
            self._run(batch)

    def _run(self, batch: list[_Job]) -> None:
        while batch:
            pairs = [pair for job in batch for pair in job.pairs]
            start = time.perf_counter()
            try:
                pieces = split(self._grade(pairs), [len(job.pairs) for job in batch])
            except Exception as e:  # every request of the batch gets the error; the thread lives on
                if isinstance(e, NoTokens) and (rest := _refused(batch, e)) is not None:
                    batch = rest  # one request's text: it alone is refused, the others are graded again without it
                    continue
                for job in batch:
                    job.future.set_exception(e)
                return
            seconds = time.perf_counter() - start
            for job, piece in zip(batch, pieces):
                job.future.set_result(piece)
            if self._on_batch:
                self._on_batch(BatchStats(len(batch), len(pairs), seconds))
            return


def _refused(batch: list[_Job], e: NoTokens) -> list[_Job] | None:
    """The jobs of `batch` but the one holding the merged run's pair `e.index`, which gets NoTokens for its own pair
    (its index within the request); None where no job holds it. Refused here, after the run's one tokenisation, so
    that no request is tokenised on its own beforehand (on the server's event loop)."""
    start = 0
    for k, job in enumerate(batch):
        if e.index < start + len(job.pairs):
            job.future.set_exception(NoTokens(e.index - start, e.side, e.shown))
            return batch[:k] + batch[k + 1:]
        start += len(job.pairs)
    return None
