"""A real specdec-serve on a loopback port, in a thread of the test process, bounded and stopped on exit."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from tiny import SlowRunner, tiny_pair

from specdec_tui.config import ServerSettings, Settings, load_settings
from specdec_tui.observability.setup import Observers
from specdec_tui.runtime import Runtime
from specdec_tui.server.app import ServerState, create_app

START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10


def serving_settings(**server: Any) -> Settings:
    base, _ = load_settings()
    return base.model_copy(update={"server": ServerSettings(host="127.0.0.1", port=0, **server)})


def tiny_runtime(delay: float = 0.0, eos: bool = False, settings: Settings | None = None,
                 observers: Observers | None = None) -> Runtime:
    """The tiny pair as a runtime; each target pass takes ``delay`` s; ``eos`` False never stops early."""
    pair = tiny_pair()
    if delay:
        pair.target.runner = SlowRunner(pair.target.runner, delay)  # type: ignore[assignment]
    runtime = Runtime.from_pair(settings or serving_settings(), pair, observers)
    if not eos:
        runtime.engine.decoder.eos_ids = frozenset()
    return runtime


def free_port() -> int:
    """A port on loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(runtime: Runtime | None, **server: Any) -> Iterator[tuple[str, ServerState]]:
    """Serve ``runtime`` (None: still loading) on 127.0.0.1 at a free port; yields (base URL, state)."""
    settings = serving_settings(**server)
    state = ServerState(settings, runtime.observers if runtime is not None else None)
    if runtime is not None:
        state.ready(Runtime(settings, runtime.pair, runtime.engine, runtime.observers, runtime.breakers))
    config = uvicorn.Config(create_app(state), host="127.0.0.1", port=0, log_level="warning",
                            timeout_graceful_shutdown=2)
    http = uvicorn.Server(config)
    thread = threading.Thread(target=http.run, name="test-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while not http.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.02)
    port = http.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        http.should_exit = True
        thread.join(STOP_TIMEOUT_S)
        assert not thread.is_alive(), "the test server did not stop"
