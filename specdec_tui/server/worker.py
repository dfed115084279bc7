"""One engine, one reply at a time: a bounded FIFO of jobs served by a single worker thread.

The engine holds mutable KV caches, so replies never overlap. A request waits in the queue until
the worker claims it or its wait times out (whichever comes first wins, under a lock, so a job is
never both abandoned and run). Events cross from the worker thread to the request's event loop
through ``loop.call_soon_threadsafe``; the request sets ``cancel`` to stop its reply between steps.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from specdec_tui.engine.decoder import DecodeParams, Event

#: Runs one job's reply: its events.
Generate = Callable[["Job"], Iterator[Event]]


class QueueFull(Exception):
    """Every place in the queue is taken."""


class QueueTimeout(Exception):
    """The request waited in the queue longer than its timeout."""


@dataclass(frozen=True)
class Started:
    """The worker claimed the job; ``waited_s`` is how long it queued."""

    waited_s: float


@dataclass(frozen=True)
class Failed:
    error: BaseException


@dataclass(frozen=True)
class Ended:
    """Nothing more comes for this job."""


JobItem = Started | Event | Failed | Ended


@dataclass
class Job:
    prompt_ids: Sequence[int]
    params: DecodeParams
    mode: str
    fresh: bool
    loop: asyncio.AbstractEventLoop
    #: What the reply's listeners are told: the GenAI operation, the chat, the request's trace context.
    operation: str = "chat"
    messages: Sequence[dict[str, str]] | None = None
    parent: object | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    items: asyncio.Queue[JobItem] = field(default_factory=asyncio.Queue)
    queued_at: float = field(default_factory=time.perf_counter)
    _state: str = "queued"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _put(self, item: JobItem) -> None:
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the request's loop is gone (server shutting down): nobody to tell
            self.cancel.set()

    def _claim(self) -> bool:
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "running"
            return True

    def _abandon(self) -> bool:
        """Withdraw a job that has not started; False if the worker already claimed it."""
        with self._lock:
            if self._state != "queued":
                return False
            self._state = "abandoned"
            return True


class EngineWorker:
    def __init__(self, generate: Generate, queue_size: int) -> None:
        """``queue_size`` jobs may wait while one runs."""
        self.generate = generate
        self.queue_size = queue_size
        self.jobs: queue.Queue[Job | None] = queue.Queue()
        self.running: Job | None = None
        #: Jobs in the queue that nobody has withdrawn.
        self.waiting = 0
        self._count_lock = threading.Lock()
        self.thread = threading.Thread(target=self._serve, name="specdec-engine", daemon=True)
        self.thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job``; QueueFull when ``queue_size`` jobs already wait (an idle worker takes one more)."""
        with self._count_lock:
            idle = self.running is None and self.waiting == 0
            if self.waiting >= self.queue_size and not idle:
                raise QueueFull
            self.waiting += 1
        self.jobs.put_nowait(job)

    def withdraw(self, job: Job) -> bool:
        """Take back a job that has not started; False if the worker already claimed it."""
        with self._count_lock:
            if not job._abandon():
                return False
            self.waiting -= 1
            return True

    async def wait_started(self, job: Job, timeout: float) -> Started:
        """Wait for the worker to claim ``job``; QueueTimeout (job withdrawn) after ``timeout`` seconds."""
        try:
            item = await asyncio.wait_for(job.items.get(), timeout)
        except TimeoutError:
            if self.withdraw(job):
                raise QueueTimeout from None
            item = await job.items.get()  # claimed at the last moment: its Started is on the way
        if isinstance(item, Failed):  # withdrawn by a shutting-down worker
            raise QueueTimeout(str(item.error)) from item.error
        assert isinstance(item, Started)
        return item

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            with self._count_lock:
                if not job._claim():
                    continue  # withdrawn while it waited; already uncounted
                self.waiting -= 1
                self.running = job
            job._put(Started(time.perf_counter() - job.queued_at))
            try:
                for event in self.generate(job):
                    job._put(event)
            except Exception as exc:  # noqa: BLE001 - a failed reply is reported to its request, never fatal
                job._put(Failed(exc))
            finally:
                with self._count_lock:
                    self.running = None
                job._put(Ended())

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel the running reply, end the waiting ones and the thread."""
        if self.running is not None:
            self.running.cancel.set()
        while True:
            try:
                waiting = self.jobs.get_nowait()
            except queue.Empty:
                break
            if waiting is not None and self.withdraw(waiting):
                waiting._put(Failed(QueueTimeout("the server is shutting down")))
        self.jobs.put(None)
        self.thread.join(timeout)
