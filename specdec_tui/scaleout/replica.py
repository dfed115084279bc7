"""An engine replica: a loaded model pair and the single-process server's app, as a Serve deployment.

Serve starts a replica when its constructor returns, so a replica takes requests only once its
models are loaded, and a replica that fails to load is reported by Serve as a failed deployment.
"""

from __future__ import annotations

import contextlib
import fcntl
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import torch
from ray import serve

from specdec_tui.config import Settings
from specdec_tui.models.loader import ModelPair
from specdec_tui.observability.setup import observers_from_settings
from specdec_tui.runtime import Runtime, load_pair_for
from specdec_tui.scaleout.asgi import HTTPCall, ResponseBody, ResponseStart, asgi_response
from specdec_tui.scaleout.board import POST_EVERY_S, Notice, open_board
from specdec_tui.scaleout.draft_actor import DraftFactory, start_draft_actor
from specdec_tui.server.app import ServerState, create_app, health_report

#: Loads the pair the settings name (the tests pass one that builds the tiny pair).
PairFactory = Callable[[Settings], ModelPair]


@contextlib.contextmanager
def one_load_at_a_time(cache_dir: Path) -> Iterator[None]:
    """Hold the machine's model-loading lock: replicas starting together load one after another.

    The first load of a model packs it, peaking well above what the loaded pair holds, and two of
    those at once on one machine can exhaust its memory; the replicas after it map the packed entry
    that load wrote. On a few cores they would not finish sooner side by side either.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".replica-load.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_replica_pair(settings: Settings, make_pair: PairFactory | None, make_draft: DraftFactory | None) -> ModelPair:
    """The replica's pair: both models here, or with ``ray.draft_actor`` the draft in its own actor."""
    make_pair = make_pair or load_pair_for
    with one_load_at_a_time(settings.models.cache_dir):
        if not settings.ray.draft_actor or settings.models.draft is None:
            return make_pair(settings)
        target_only = settings.model_copy(update={"models": settings.models.model_copy(update={"draft": None})})
        target = make_pair(target_only).target
        return ModelPair(target, start_draft_actor(settings, make_draft, target))


@serve.deployment(graceful_shutdown_timeout_s=5, health_check_period_s=2)
class EngineReplica:
    def __init__(self, settings: Settings, app_name: str, make_pair: PairFactory | None = None,
                 make_draft: DraftFactory | None = None) -> None:
        torch.set_num_threads(max(1, round(settings.ray.cpus_per_replica)))
        observers = observers_from_settings(settings)
        self.state = ServerState(settings, observers)
        self.state.ready(Runtime.from_pair(settings, load_replica_pair(settings, make_pair, make_draft), observers))
        self.app = create_app(self.state)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.board = open_board(app_name)
        self._closed = threading.Event()
        self._poster = threading.Thread(target=self._post_notices, name="specdec-notices", daemon=True)
        self._poster.start()

    async def handle(self, call: HTTPCall, affinity: str | None = None
                     ) -> AsyncIterator[str | ResponseStart | ResponseBody]:
        """This replica's id, then ``call``'s response through the server's app.

        ``affinity`` is read by the router (it names the conversation), not here.
        """
        yield self.replica
        try:
            async for part in asgi_response(self.app, call):
                yield part
        finally:
            self.board.post.remote(self.notice())  # the board counts this request at once, not a second later

    def notice(self) -> Notice:
        health, status = health_report(self.state)
        return Notice(self.replica, time.time(), health, status, self.state.metrics.exposition().decode())

    def _post_notices(self) -> None:
        while True:
            self.board.post.remote(self.notice())
            if self._closed.wait(POST_EVERY_S):
                return

    def check_health(self) -> None:
        """Serve's probe: a replica whose engine thread has died is replaced."""
        worker = self.state.worker
        if worker is None or not worker.thread.is_alive():
            raise RuntimeError("the engine's worker thread is not running")

    def __del__(self) -> None:
        self._closed.set()
        self.board.take_down.remote(self.replica)
        self.state.close()
