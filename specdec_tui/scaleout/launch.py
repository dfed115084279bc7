"""Deploying the engine replicas and their front on a Ray cluster, and ``specdec-serve --ray``."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import ray
from ray import serve
from ray.serve.config import RequestRouterConfig

from specdec_tui.config import Settings
from specdec_tui.scaleout.board import close_board, open_board
from specdec_tui.scaleout.draft_actor import DraftFactory
from specdec_tui.scaleout.frontend import Frontend
from specdec_tui.scaleout.replica import EngineReplica, PairFactory
from specdec_tui.scaleout.routing import AffinityRouter

APP_NAME = "specdec"


def replica_options(settings: Settings) -> dict[str, Any]:
    """The engine deployment's Serve options, from the ``[ray]`` and ``[server]`` settings."""
    rs = settings.ray
    options: dict[str, Any] = {
        "max_ongoing_requests": rs.max_ongoing_requests,
        # Serve's queue in front of the replicas stands for the single server's queue.
        "max_queued_requests": max(1, settings.server.queue_size),
        "ray_actor_options": {"num_cpus": rs.cpus_per_replica},
    }
    if rs.replicas == "auto":
        options["autoscaling_config"] = {"min_replicas": rs.min_replicas, "max_replicas": rs.max_replicas,
                                         "target_ongoing_requests": rs.target_ongoing_requests}
    else:
        options["num_replicas"] = rs.replicas
    if rs.affinity:
        options["request_router_config"] = RequestRouterConfig(request_router_class=AffinityRouter)
    if rs.draft_actor and settings.models.draft is not None:
        # The replica in the first bundle, its draft actor in the second, on one node.
        options["placement_group_bundles"] = [{"CPU": rs.cpus_per_replica}, {"CPU": rs.draft_cpus}]
        options["placement_group_strategy"] = "STRICT_PACK"
    return options


def build_application(settings: Settings, make_pair: PairFactory | None = None,
                      make_draft: DraftFactory | None = None, app_name: str = APP_NAME) -> serve.Application:
    engine = EngineReplica.options(**replica_options(settings)).bind(settings, app_name, make_pair, make_draft)
    return Frontend.bind(engine, settings, app_name)


def deploy(settings: Settings, make_pair: PairFactory | None = None, make_draft: DraftFactory | None = None,
           app_name: str = APP_NAME) -> None:
    """Start Serve's HTTP proxy on the server's host and port and run the application; returns once every
    replica has loaded its models."""
    serve.start(http_options={"host": settings.server.host, "port": settings.server.port})
    open_board(app_name)
    serve.run(build_application(settings, make_pair, make_draft, app_name), name=app_name, route_prefix="/")


def undeploy(app_name: str = APP_NAME) -> None:
    serve.delete(app_name)
    close_board(app_name)


def join_cluster(settings: Settings) -> bool:
    """Connect to ``ray.address``, or start a local cluster; True when this process started it."""
    rs = settings.ray
    if rs.address:
        ray.init(address=rs.address, namespace="specdec", log_to_driver=False)
        return False
    ray.init(num_cpus=rs.num_cpus, include_dashboard=False, namespace="specdec", log_to_driver=False)
    return True


def serve_on_ray(settings: Settings) -> int:
    """``specdec-serve --ray``: deploy, print where, serve until interrupted, then take it all down."""
    host, port = settings.server.host, settings.server.port
    started_cluster = join_cluster(settings)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        print(f"specdec-serve: deploying {settings.ray.replicas} replica(s) of {settings.models.target} <- "
              f"{settings.models.draft or 'no draft'} on Ray", file=sys.stderr)
        deploy(settings)
    except Exception as exc:  # noqa: BLE001 - a replica that cannot load fails the deployment: say why, once
        print(f"specdec-serve: error: the Ray deployment failed: {exc}", file=sys.stderr)
        if started_cluster:
            ray.shutdown()
        return 1
    print(f"specdec-serve: ready on Ray: http://{host}:{port}/v1 (Ctrl+C stops)", file=sys.stderr)
    try:
        stop.wait()
    finally:
        undeploy()
        serve.shutdown()
        if started_cluster:
            ray.shutdown()
    return 0
