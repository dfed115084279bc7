"""The specdec-serve command as a user starts it: a real process on loopback, on tiny model folders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from serving import free_port
from tiny import perturbed, save_tiny, tiny_model, tiny_tokenizer

START_TIMEOUT_S = 120


def serve(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specdec_tui.server.cli", *flags], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, check=False)


def stop_with_sigterm(process: subprocess.Popen[str], timeout: float, what: str) -> None:
    """SIGTERM ``process`` and wait ``timeout`` s for it to end; kill it and fail if it does not."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)
        raise AssertionError(f"{what} did not stop on SIGTERM") from None


def test_show_settings_hides_the_api_key_and_a_bad_value_is_one_line():
    shown = serve("--show-settings", env={"SPECDEC_SERVER__API_KEY": "s3cret"})
    assert shown.returncode == 0
    assert "server.api_key = '***'" in shown.stdout and "s3cret" not in shown.stdout
    bad = serve("--port", "99999")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "specdec-serve: error: server.port = '99999' (from command line): input should be less than or equal to 65535"]


def test_the_command_serves_tiny_model_folders_and_stops_on_sigterm(tmp_path: Path):
    target = save_tiny(tmp_path / "target")
    draft_model = perturbed(tiny_model("qwen2"), 0.02)
    draft_model.save_pretrained(tmp_path / "draft")
    tiny_tokenizer().save_pretrained(tmp_path / "draft")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "specdec_tui.server.cli", "--target", str(target), "--draft", str(tmp_path / "draft"),
         "--precision", "fp32", "--draft-precision", "fp32", "--port", str(port), "--cache-dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, statuses = time.monotonic() + START_TIMEOUT_S, []
        while True:
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "specdec-serve did not become ready"
            try:
                statuses.append(httpx.get(f"{url}/health", timeout=2).status_code)
            except httpx.HTTPError:
                pass
            if statuses and statuses[-1] == 200:
                break
            time.sleep(0.2)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)
        [model] = client.models.list().data
        assert model.id == str(target)
        reply = client.chat.completions.create(model=model.id, messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=5, extra_body={"speculative": {"mode": "hybrid"}})
        assert reply.model_extra["speculative"]["mode"] == "hybrid"
        assert reply.usage.completion_tokens >= 1
    finally:
        stop_with_sigterm(process, 20, "specdec-serve")
    # uvicorn shuts down gracefully, then re-raises the signal so the parent sees why it ended.
    assert process.returncode in (0, -signal.SIGTERM)
    log = process.stderr.read() if process.stderr else ""
    assert "ready: " in log and "Finished server process" in log


def test_models_that_fail_to_load_end_the_server_with_one_line(tmp_path: Path):
    done = serve("--target", str(tmp_path / "nope"), "--draft", str(tmp_path / "nope"), "--port", str(free_port()),
                 "--cache-dir", str(tmp_path / "c"))
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("specdec-serve: error:")]
    assert len(errors) == 1 and "nope" in errors[0]


def test_the_command_with_ray_serves_from_a_replica_and_takes_its_cluster_down_on_sigterm(tmp_path: Path):
    pytest.importorskip("ray")
    target = save_tiny(tmp_path / "target")
    port = free_port()
    log_path = tmp_path / "serve.log"
    log_file = log_path.open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "specdec_tui.server.cli", "--ray", "--replicas", "1", "--target", str(target),
         "--draft", str(target), "--precision", "fp32", "--draft-precision", "fp32", "--port", str(port),
         "--cache-dir", str(tmp_path / "c")],
        stdout=subprocess.DEVNULL, stderr=log_file, text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "SPECDEC_RAY__NUM_CPUS": "2"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while "ready on Ray" not in log_path.read_text():
            assert process.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "specdec-serve --ray did not become ready"
            time.sleep(0.5)
        assert httpx.get(f"{url}/health", timeout=10).json()["status"] == "ok"
        response = httpx.post(f"{url}/v1/chat/completions", timeout=30, json={
            "model": str(target), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5})
        assert response.status_code == 200, response.text
        assert response.headers["x-specdec-replica"] and response.json()["usage"]["completion_tokens"] >= 1
    finally:
        stop_with_sigterm(process, 60, "specdec-serve --ray")
    log_file.close()
    log = log_path.read_text()
    assert process.returncode == 0, log[-2000:]
    assert "stopping" in log
    deadline = time.monotonic() + 15  # a worker exits a moment after its raylet
    while leftovers := subprocess.run(["pgrep", "-f", "ray::ServeReplica"], check=False, capture_output=True,
                                      text=True).stdout:
        assert time.monotonic() < deadline, f"replica processes outlived the cluster: {leftovers}"
        time.sleep(0.5)
