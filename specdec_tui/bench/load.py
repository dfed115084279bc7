"""specdec-bench serve: N concurrent streaming clients against a running specdec-serve.

For each concurrency level it sends a fixed number of streamed chat requests (prompts from the
suite, in turn), at most N in flight, and reports what a caller saw: completed requests, errors
(anything but a designed 503 refusal), refusals, time to first token and end-to-end latency
(p50 / p95), and the tokens per second of the whole level.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from specdec_tui.bench.suite import SuiteError, default_suite_path, load_suite


@dataclass(frozen=True)
class RequestResult:
    status: int
    ttft_s: float | None
    e2e_s: float
    tokens: int
    error: str | None = None


@dataclass(frozen=True)
class LevelSummary:
    concurrency: int
    completed: int
    errors: int
    refused: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    tokens_per_s: float
    seconds: float


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` quantile by the nearest-rank rule; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(share * len(ordered) + 0.5)))
    return ordered[rank - 1]


async def one_request(client: httpx.AsyncClient, body: dict[str, Any]) -> RequestResult:
    start = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                return RequestResult(response.status_code, None, time.perf_counter() - start, 0,
                                     response.text[:200])
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line.removeprefix("data: "))
                if "error" in chunk:
                    return RequestResult(500, ttft, time.perf_counter() - start, tokens, chunk["error"]["message"])
                if ttft is None and any(c.get("delta", {}).get("content") for c in chunk.get("choices", [])):
                    ttft = time.perf_counter() - start
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError as exc:
        return RequestResult(0, ttft, time.perf_counter() - start, tokens, f"{type(exc).__name__}: {exc}")
    return RequestResult(200, ttft, time.perf_counter() - start, tokens)


async def run_level(url: str, api_key: str | None, bodies: Sequence[dict[str, Any]], concurrency: int,
                    timeout: float) -> tuple[LevelSummary, list[RequestResult]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=concurrency)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, limits=limits,
                                 timeout=httpx.Timeout(timeout)) as client:

        async def gated(body: dict[str, Any]) -> RequestResult:
            async with gate:
                return await one_request(client, body)

        start = time.perf_counter()
        results = await asyncio.gather(*(gated(b) for b in bodies))
        seconds = time.perf_counter() - start
    done = [r for r in results if r.status == 200 and r.error is None]
    ms = [1000 * r.ttft_s for r in done if r.ttft_s is not None]
    e2e = [1000 * r.e2e_s for r in done]
    summary = LevelSummary(
        concurrency=concurrency,
        completed=len(done),
        errors=sum(r.status != 503 and (r.status != 200 or r.error is not None) for r in results),
        refused=sum(r.status == 503 for r in results),
        ttft_p50_ms=percentile(ms, 0.5),
        ttft_p95_ms=percentile(ms, 0.95),
        e2e_p50_ms=percentile(e2e, 0.5),
        e2e_p95_ms=percentile(e2e, 0.95),
        tokens_per_s=sum(r.tokens for r in done) / seconds if seconds > 0 else 0.0,
        seconds=seconds,
    )
    return summary, list(results)


def format_levels(levels: Sequence[LevelSummary]) -> str:
    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:.0f}"

    lines = ["| clients | completed | errors | refused (503) | TTFT p50 / p95 ms | e2e p50 / p95 ms | tok/s | seconds |",
             "|---|---|---|---|---|---|---|---|"]
    for s in levels:
        lines.append(f"| {s.concurrency} | {s.completed} | {s.errors} | {s.refused} | {ms(s.ttft_p50_ms)} / "
                     f"{ms(s.ttft_p95_ms)} | {ms(s.e2e_p50_ms)} / {ms(s.e2e_p95_ms)} | {s.tokens_per_s:.1f} | "
                     f"{s.seconds:.1f} |")
    return "\n".join(lines)


def request_bodies(model: str, prompts: Path, count: int, max_tokens: int,
                   speculative: dict[str, Any]) -> list[dict[str, Any]]:
    suite = load_suite(prompts)
    return [{"model": model, "messages": suite[i % len(suite)].messages, "max_tokens": max_tokens,
             "temperature": 0, "stream": True, "stream_options": {"include_usage": True},
             **({"speculative": speculative} if speculative else {})} for i in range(count)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="specdec-bench serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="the running specdec-serve")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated client counts")
    parser.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--mode", default=None, help="speculative.mode for every request (default: the server's)")
    parser.add_argument("--prompts", type=Path, default=None, help="JSONL prompt suite (default: the bundled one)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one request may take")
    parser.add_argument("--out", type=Path, default=None, help="also write every request's result as JSONL")
    args = parser.parse_args(argv)
    try:
        args.levels = [int(n) for n in args.concurrency.split(",") if n.strip()]
    except ValueError:
        parser.error(f"--concurrency must be comma-separated numbers, not {args.concurrency!r}")
    if not args.levels or min(args.levels) < 1 or args.requests < 1 or args.max_tokens < 1:
        parser.error("--concurrency, --requests and --max-tokens must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        models = httpx.get(f"{args.url.rstrip('/')}/v1/models", headers=headers, timeout=10)
        models.raise_for_status()
        model = models.json()["data"][0]["id"]
        bodies = request_bodies(model, args.prompts or default_suite_path(), args.requests, args.max_tokens,
                                {"mode": args.mode} if args.mode else {})
    except (httpx.HTTPError, KeyError, IndexError) as exc:
        print(f"specdec-bench serve: error: cannot use the server at {args.url}: {exc}", file=sys.stderr)
        return 2
    except SuiteError as exc:
        print(f"specdec-bench serve: error: {exc}", file=sys.stderr)
        return 2
    levels = []
    rows: list[dict[str, Any]] = []
    for concurrency in args.levels:
        summary, results = asyncio.run(run_level(args.url, args.api_key, bodies, concurrency, args.timeout))
        levels.append(summary)
        rows.extend({"concurrency": concurrency, **r.__dict__} for r in results)
        print(f"{concurrency} clients: {summary.completed}/{len(bodies)} completed, {summary.errors} errors, "
              f"{summary.tokens_per_s:.1f} tok/s", file=sys.stderr)
    print(f"model {model}, {args.requests} requests per level, max_tokens {args.max_tokens}, greedy")
    print(format_levels(levels))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"rows: {args.out}")
    return 1 if any(s.errors for s in levels) else 0
