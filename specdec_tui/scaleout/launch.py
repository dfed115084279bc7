"""Deploying the engine replicas and their front on a Ray cluster, and ``specdec-serve --ray``."""

from __future__ import annotations

import os
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
        "ray_actor_options": {"num_cpus": rs.cpus_per_replica, "num_gpus": rs.gpus_per_replica},
    }
    if rs.replicas == "auto":
        options["autoscaling_config"] = {"min_replicas": rs.min_replicas, "max_replicas": rs.max_replicas,
                                         "target_ongoing_requests": rs.target_ongoing_requests}
    else:
        options["num_replicas"] = rs.replicas
    if rs.affinity:
        # A waiting request asks again within 0.2 s of a replica freeing up (Serve's default: 0.5 s).
        options["request_router_config"] = RequestRouterConfig(request_router_class=AffinityRouter,
                                                               max_backoff_s=0.2)
    if rs.draft_actor and settings.models.draft is not None:
        # The replica in the first bundle, its draft actor in the second, on one node.
        replica_bundle = {"CPU": rs.cpus_per_replica, **({"GPU": rs.gpus_per_replica} if rs.gpus_per_replica else {})}
        options["placement_group_bundles"] = [replica_bundle, {"CPU": rs.draft_cpus}]
        options["placement_group_strategy"] = "STRICT_PACK"
    return options


def build_application(settings: Settings, make_pair: PairFactory | None = None,
                      make_draft: DraftFactory | None = None, app_name: str = APP_NAME) -> serve.Application:
    engine = EngineReplica.options(**replica_options(settings)).bind(settings, app_name, make_pair, make_draft)
    return Frontend.options(num_replicas=settings.ray.front_replicas).bind(engine, settings, app_name)


def application(args: dict[str, str]) -> serve.Application:
    """The application for ``serve run`` / ``serve deploy`` / KubeRay (an application builder).

    ``args`` are settings as ``group.name: value`` (``ray.replicas: "2"``), over the config file
    (``config: path``) and ``SPECDEC_*`` variables, as on the command line.
    """
    return build_application(settings_from_builder_args(args))


def settings_from_builder_args(args: dict[str, str]) -> Settings:
    from pathlib import Path

    from specdec_tui.config import load_settings, nested_settings

    for key in args:
        if key != "config" and "." not in key:
            raise ValueError(f"application argument {key!r}: expected group.name (ray.replicas) or config")
    settings, _ = load_settings(nested_settings(args), config=Path(args["config"]) if "config" in args else None)
    return settings


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


#: The environment of a local cluster this process starts (its daemons and workers inherit it).
LOCAL_CLUSTER_ENV = {
    # Ray runs its workers at nice 15 so that its own daemons stay responsive; here the workers are
    # the engines, and at 15 every daemon's wake-up takes the CPU from a decoding step.
    "RAY_worker_niceness": "0",
    # Serve gives a new HTTP proxy 5 s to report ready, three times, then kills it, and serve.start()
    # fails on the killed one; a busy 2-core machine can take longer than that to start a worker.
    "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S": "30",
}


def local_cluster_env() -> None:
    """Set ``LOCAL_CLUSTER_ENV`` (where not set already) before starting a local cluster."""
    for name, value in LOCAL_CLUSTER_ENV.items():
        os.environ.setdefault(name, value)


def join_cluster(settings: Settings) -> bool:
    """Connect to ``ray.address``, or start a local cluster; True when this process started it."""
    rs = settings.ray
    if rs.address:
        ray.init(address=rs.address, namespace="specdec", log_to_driver=False)
        return False
    local_cluster_env()
    ray.init(num_cpus=rs.num_cpus, include_dashboard=False, namespace="specdec", log_to_driver=False)
    return True


def serve_on_ray(settings: Settings) -> int:
    """``specdec-serve --ray``: deploy, print where, serve until interrupted, then take it all down."""
    host, port = settings.server.host, settings.server.port
    started_cluster = join_cluster(settings)
    # SIGTERM stops it as Ctrl+C does. Set after ray.init, whose own handler would abort the process.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    deployed = False
    try:
        print(f"specdec-serve: deploying {settings.ray.replicas} replica(s) of {settings.models.target} <- "
              f"{settings.models.draft or 'no draft'} on Ray", file=sys.stderr)
        try:
            deploy(settings)
        except Exception as exc:  # noqa: BLE001 - a replica that cannot load fails the deployment: say why, once
            print(f"specdec-serve: error: the Ray deployment failed: {exc}", file=sys.stderr)
            return 1
        deployed = True
        print(f"specdec-serve: ready on Ray: http://{host}:{port}/v1 (Ctrl+C stops)", file=sys.stderr)
        threading.Event().wait()
    except KeyboardInterrupt:
        print("specdec-serve: stopping", file=sys.stderr)
    finally:
        if deployed:
            undeploy()
        serve.shutdown()
        if started_cluster:
            ray.shutdown()
    return 0
