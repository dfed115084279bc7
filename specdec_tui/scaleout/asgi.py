"""One HTTP request through an ASGI app in this process, its response as picklable messages.

A replica runs the single-process server's app this way, so every route, error and stream behaves
as it does there. The request's body is handed over whole; after it, ``receive`` waits for the
caller to go away, which the app sees as ``http.disconnect`` (and stops the reply).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Message = MutableMapping[str, Any]
ASGIApp = Callable[[Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]

#: Seconds an app gets to finish after its caller left, before it is cancelled.
DRAIN_S = 5.0


@dataclass(frozen=True)
class HTTPCall:
    """An HTTP request as it crosses to a replica."""

    method: str
    path: str
    query: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    client: tuple[str, int] = ("127.0.0.1", 0)


@dataclass(frozen=True)
class ResponseStart:
    status: int
    headers: tuple[tuple[str, str], ...]

    def header(self, name: str) -> str | None:
        return next((value for key, value in self.headers if key.lower() == name), None)


@dataclass(frozen=True)
class ResponseBody:
    body: bytes
    more: bool


@dataclass
class _Exchange:
    call: HTTPCall
    sent: asyncio.Queue[Message | None] = field(default_factory=asyncio.Queue)
    gone: asyncio.Event = field(default_factory=asyncio.Event)
    body_read: bool = False

    async def receive(self) -> Message:
        if not self.body_read:
            self.body_read = True
            return {"type": "http.request", "body": self.call.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        await self.sent.put(message)


def scope_of(call: HTTPCall) -> Message:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": call.path,
        "raw_path": call.path.encode(),
        "query_string": call.query.encode(),
        "root_path": "",
        "headers": [(key.lower().encode("latin-1"), value.encode("latin-1")) for key, value in call.headers],
        "client": call.client,
        "server": ("127.0.0.1", 80),
        "state": {},
    }


async def asgi_response(app: ASGIApp, call: HTTPCall) -> AsyncIterator[ResponseStart | ResponseBody]:
    """``call`` through ``app``: its start, then its body pieces; closing this early disconnects the app."""
    exchange = _Exchange(call)
    task = asyncio.ensure_future(app(scope_of(call), exchange.receive, exchange.send))
    task.add_done_callback(lambda _: exchange.sent.put_nowait(None))
    try:
        while (message := await exchange.sent.get()) is not None:
            if message["type"] == "http.response.start":
                yield ResponseStart(message["status"], tuple((k.decode("latin-1"), v.decode("latin-1"))
                                                             for k, v in message.get("headers", ())))
            elif message["type"] == "http.response.body":
                more = bool(message.get("more_body", False))
                yield ResponseBody(bytes(message.get("body", b"")), more)
                if not more:
                    return
        task.result()  # the app ended without a whole response: its error is the caller's
        raise RuntimeError(f"{call.method} {call.path} ended without a response")
    finally:
        exchange.gone.set()
        if not task.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), DRAIN_S)
            task.cancel()
