"""MLflow: one run per bench invocation (a child run per K and tau of a sweep), and one run per
chat or server reply, logged from a background thread so no reply ever waits on the backend.

A tracking backend that cannot be reached, or refuses, costs one warning: the bench's CSV is
written before anything is logged, and a reply is on screen before its run is.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import re
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import platformdirs
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from specdec_tui.engine.decoder import Event, FinishedEvent
from specdec_tui.observability.events import ReplyInfo

log = logging.getLogger("specdec_tui.observability")
BENCH_EXPERIMENT = "specdec-bench"
PARENT_TAG = "mlflow.parentRunId"
#: Seconds ``ReplyTracker.close`` waits for queued replies to be logged.
CLOSE_TIMEOUT_S = 10


def default_tracking_uri() -> str:
    """A SQLite file in the user's data folder: ``mlflow ui --backend-store-uri`` it to browse."""
    return f"sqlite:///{Path(platformdirs.user_data_dir('specdec-tui')) / 'mlflow.db'}"


def resolve_tracking_uri(uri: str) -> str:
    return default_tracking_uri() if uri == "default" else uri


def _sqlite_file(uri: str) -> Path | None:
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def experiment_id(client: MlflowClient, uri: str, name: str) -> str:
    """The experiment's id, creating it (with its artifacts beside a SQLite store) if it is new."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    database = _sqlite_file(uri)
    location = (database.parent / "mlartifacts" / name).as_uri() if database is not None else None
    return client.create_experiment(name, artifact_location=location)


def open_client(uri: str) -> MlflowClient:
    database = _sqlite_file(uri)
    if database is not None:
        database.parent.mkdir(parents=True, exist_ok=True)
    return MlflowClient(tracking_uri=uri)


def package_version() -> str:
    try:
        return metadata.version("specdec-tui")
    except metadata.PackageNotFoundError:
        return "unknown"


def git_commit() -> str | None:
    """The commit of the source tree the package runs from, when it is a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, check=False,
                             text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def model_versions(target: str, draft: str | None) -> dict[str, str]:
    """How each model is pinned: a preset by its GGUF file's sha256, anything else by its reference."""
    from specdec_tui.models.presets import PRESETS

    def version(reference: str) -> str:
        return f"sha256:{PRESETS[reference].gguf_sha256}" if reference in PRESETS else reference

    return {"target_version": version(target), **({"draft_version": version(draft)} if draft else {})}


def _params(values: dict[str, Any]) -> list[Param]:
    # MLflow keeps at most 6000 characters of a value.
    return [Param(key, str(value)[:6000]) for key, value in values.items() if value is not None]


def metric_key(name: str) -> str:
    """``name`` with what MLflow refuses in a metric name (``+``, ``=``...) as ``_``."""
    return re.sub(r"[^A-Za-z0-9_\-. :/]", "_", name)


def _metrics(values: dict[str, float | None], step: int = 0) -> list[Metric]:
    now = int(time.time() * 1000)
    return [Metric(metric_key(key), float(value), now, step) for key, value in values.items() if value is not None]


# ------------------------------------------------------------------ bench runs


@dataclass(frozen=True)
class BenchLog:
    """What one bench invocation leaves: its plan and models, metrics, and files."""

    params: dict[str, Any]
    metrics: dict[str, float | None]
    #: A sweep's child runs: (draft, K, tau) -> the params that differ from the parent's, and the metrics.
    children: dict[tuple[str, int, float], tuple[dict[str, Any], dict[str, float | None]]]
    artifacts: Sequence[Path]
    texts: dict[str, str]
    run_name: str


def log_bench(uri: str, bench: BenchLog, experiment: str = BENCH_EXPERIMENT) -> str | None:
    """Log ``bench`` as a run (and child runs); its id, or None (with one warning) if the backend fails."""
    try:
        client = open_client(uri)
        exp = experiment_id(client, uri, experiment)
        run = client.create_run(exp, run_name=bench.run_name)
        run_id = run.info.run_id
        client.log_batch(run_id, metrics=_metrics(bench.metrics), params=_params(bench.params))
        for path in bench.artifacts:
            if path.is_file():
                client.log_artifact(run_id, str(path))
        for name, text in bench.texts.items():
            client.log_text(run_id, text, name)
        for (draft, k, tau), (params, metrics) in bench.children.items():
            name = f"{bench.run_name}{f' {draft}' if draft else ''} k={k} tau={tau:g}"
            child = client.create_run(exp, run_name=name, tags={PARENT_TAG: run_id})
            client.log_batch(child.info.run_id, metrics=_metrics(metrics),
                             params=_params({**bench.params, **params, "k": k, "tau": tau}))
            client.set_terminated(child.info.run_id)
        client.set_terminated(run_id)
        return run_id
    except Exception as exc:  # noqa: BLE001 - any backend failure: the bench's results are already on disk
        log.warning("MLflow: could not log the bench run to %s: %s", uri, str(exc).splitlines()[0] if str(exc)
                    else type(exc).__name__)
        return None


# ------------------------------------------------------------------ chat and server replies


class ReplyTracker:
    """Logs every finished reply as a run of ``experiment``: how it was decoded, what it cost, its text."""

    def __init__(self, uri: str, experiment: str, model_versions: dict[str, str] | None = None) -> None:
        self.uri, self.experiment = uri, experiment
        self.model_versions = model_versions or {}
        self.jobs: queue.Queue[tuple[ReplyInfo, FinishedEvent] | None] = queue.Queue(maxsize=256)
        self.failed = False
        self.logged = 0
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self.thread = threading.Thread(target=self._serve, name="specdec-mlflow", daemon=True)
        self.thread.start()
        atexit.register(self.close)

    def __call__(self, events: Iterator[Event], reply: ReplyInfo) -> Iterator[Event]:
        for event in events:
            if isinstance(event, FinishedEvent):
                try:
                    self.jobs.put_nowait((reply, event))
                except queue.Full:
                    self._warn_once("the queue of replies to log is full; this reply is not logged")
            yield event

    def _warn_once(self, why: str) -> None:
        if not self.failed:
            self.failed = True
            log.warning("MLflow: %s (tracking URI %s); chat goes on, later failures are not reported", why,
                        self.uri)

    def _serve(self) -> None:
        while (job := self.jobs.get()) is not None:
            try:
                self._log(*job)
                self.logged += 1
            except Exception as exc:  # noqa: BLE001 - the backend failing never touches a reply
                self._warn_once(f"could not log a reply: {str(exc).splitlines()[0] if str(exc) else exc!r}")
            finally:
                self.jobs.task_done()
        self.jobs.task_done()

    def _log(self, reply: ReplyInfo, finished: FinishedEvent) -> None:
        if self._client is None:
            self._client = open_client(self.uri)
            self._experiment_id = experiment_id(self._client, self.uri, self.experiment)
        assert self._experiment_id is not None
        summary, params = finished.summary, reply.params
        run = self._client.create_run(self._experiment_id, run_name=f"{reply.mode} k={params.k} tau={params.tau:g}",
                                      tags={"specdec.operation": reply.operation,
                                            **({"gen_ai.conversation.id": reply.conversation_id}
                                               if reply.conversation_id else {})})
        run_id = run.info.run_id
        self._client.log_batch(run_id, params=_params({
            "target": reply.target, "draft": reply.draft, "mode": reply.mode, "k": params.k, "tau": params.tau,
            "temperature": params.temperature, "top_p": params.top_p, "max_new_tokens": params.max_new_tokens,
            "seed": params.seed, "adaptive_k": params.adaptive_k, "lookup_k": params.lookup_k,
            **self.model_versions,
        }), metrics=_metrics({
            "acceptance_rate": summary.acceptance_rate, "tokens_per_s": summary.tokens_per_s,
            "ttft_s": summary.ttft_s, "seconds": summary.seconds, "prompt_tokens": summary.prompt_tokens,
            "new_tokens": summary.new_tokens, "steps": summary.steps, "drafted": summary.drafted,
            "accepted": summary.accepted, "mean_acceptance_length": 1 + summary.mean_accepted,
            "degraded_tokens": summary.degraded_tokens, "failed_passes": summary.target_failures + summary.draft_failures,
        }), tags=[RunTag("specdec.finish_reason", summary.finish_reason)])
        prompt = json.dumps(list(reply.messages), ensure_ascii=False, indent=1) if reply.messages is not None \
            else json.dumps({"prompt_ids": list(reply.prompt_ids)})
        self._client.log_text(run_id, prompt, "prompt.json")
        self._client.log_text(run_id, finished.text, "reply.txt")
        self._client.set_terminated(run_id)

    def flush(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Wait (up to ``timeout`` s) until every queued reply is logged."""
        done = threading.Event()
        threading.Thread(target=lambda: (self.jobs.join(), done.set()), daemon=True).start()
        done.wait(timeout)

    def close(self) -> None:
        if self.thread.is_alive():
            self.flush()
            self.jobs.put(None)
            self.thread.join(CLOSE_TIMEOUT_S)


def metric_prefix(category: str, mode: str, k: int, tau: float, draft: str = "") -> str:
    """``category/mode``, then ``/draft`` in a sweep of drafts (a path's slashes as ``_``: MLflow refuses a
    name that reads as another path), and ``/kK_tauT`` for a mode that drafts (K > 0)."""
    named = f"/{draft.replace('/', '_').strip('_')}" if draft else ""
    return f"{category}/{mode}{named}" + (f"/k{k}_tau{tau:g}" if k else "")


def summary_metrics(lines: Iterable[Any], by_draft: bool = False) -> dict[str, float | None]:
    """Metric name -> value for the bench's summary lines: ``category/mode/measure``; ``by_draft`` names
    each line's draft variant too."""
    values: dict[str, float | None] = {}
    for line in lines:
        key = metric_prefix(line.category, line.mode, line.k, line.tau, line.draft if by_draft else "")
        values[f"{key}/median_tokens_per_s"] = line.median_tokens_per_s
        values[f"{key}/speedup_vs_target"] = line.median_speedup
        values[f"{key}/acceptance_rate"] = line.acceptance_rate
        values[f"{key}/identical_share"] = line.identical_share
    return values
