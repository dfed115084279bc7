"""The replicas' notice board: each replica posts its health and metrics; the front reads them all.

Serve hands out no per-replica handles, and a request to a replica that decodes one reply at a
time would wait behind it, so the front never asks the replicas directly. Each replica posts every
``POST_EVERY_S`` instead, and a notice older than ``STALE_S`` counts as a replica gone (a busy
machine was seen to delay a post by more than 5 s).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import ray

NAMESPACE = "specdec"
POST_EVERY_S = 1.0
STALE_S = 10.0


@dataclass(frozen=True)
class Notice:
    """One replica's state as it last posted it."""

    replica: str
    posted_at: float
    #: The replica's ``/health`` body and status code.
    health: dict[str, Any]
    status_code: int
    #: Its Prometheus exposition.
    metrics: str

    @property
    def ready(self) -> bool:
        return self.status_code == 200


@ray.remote(num_cpus=0)
class ReplicaBoard:
    def __init__(self) -> None:
        self.notices: dict[str, Notice] = {}

    def post(self, notice: Notice) -> None:
        self.notices[notice.replica] = notice

    def take_down(self, replica: str) -> None:
        self.notices.pop(replica, None)

    def current(self, stale_s: float = STALE_S) -> list[Notice]:
        """Notices posted in the last ``stale_s`` seconds; older ones are dropped."""
        now = time.time()
        self.notices = {r: n for r, n in self.notices.items() if now - n.posted_at <= stale_s}
        return sorted(self.notices.values(), key=lambda n: n.replica)


def board_name(app_name: str) -> str:
    return f"specdec-board-{app_name}"


def open_board(app_name: str) -> ray.actor.ActorHandle:
    """The application's board, made by whoever asks first; it outlives any one replica."""
    return ReplicaBoard.options(name=board_name(app_name), namespace=NAMESPACE, get_if_exists=True,
                                lifetime="detached").remote()


def close_board(app_name: str) -> None:
    try:
        ray.kill(ray.get_actor(board_name(app_name), namespace=NAMESPACE))
    except ValueError:
        pass
