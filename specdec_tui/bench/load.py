"""specdec-bench serve: N concurrent streaming clients against a running specdec-serve.

For each concurrency level it sends a fixed number of streamed chat requests (prompts from the
suite, in turn), at most N in flight, and reports what a caller saw: completed requests, errors
(anything but a designed 503 refusal), refusals, time to first token and end-to-end latency
(p50 / p95), and the tokens per second of the whole level.

Given several ``--url``, it measures them side by side: each level runs on every server in turn
(the order alternating from level to level), and a paired table compares each server's time to
first token, per-request decode speed and step costs with the first server's. ``--follow-up``
makes every request a conversation's second turn, sent after its first: what a chat's next turn
costs, and (behind ``specdec-serve --ray``) whether it stayed on the replica holding its cache.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from specdec_tui.bench.suite import SuiteError, default_suite_path, load_suite
from specdec_tui.scaleout import REPLICA_HEADER

#: The question that opens every follow-up turn.
FOLLOW_UP = "Thanks. Now explain that in two sentences."


@dataclass(frozen=True)
class RequestResult:
    status: int
    ttft_s: float | None
    e2e_s: float
    tokens: int
    error: str | None = None
    text: str = ""
    replica: str | None = None
    #: Per step, from the reply's speculative report.
    draft_ms: float | None = None
    verify_ms: float | None = None
    #: With --follow-up: the replica of the conversation's first turn.
    first_replica: str | None = None

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens per second after the first token, as this request saw them."""
        if self.ttft_s is None or self.tokens < 2 or self.e2e_s <= self.ttft_s:
            return None
        return (self.tokens - 1) / (self.e2e_s - self.ttft_s)


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
    text: list[str] = []
    report: dict[str, Any] = {}
    replica = None
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            replica = response.headers.get(REPLICA_HEADER)
            if response.status_code != 200:
                await response.aread()
                return RequestResult(response.status_code, None, time.perf_counter() - start, 0,
                                     response.text[:200], replica=replica)
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line.removeprefix("data: "))
                if "error" in chunk:
                    return RequestResult(500, ttft, time.perf_counter() - start, tokens, chunk["error"]["message"],
                                         "".join(text), replica)
                pieces = [c.get("delta", {}).get("content") or "" for c in chunk.get("choices", [])]
                if ttft is None and any(pieces):
                    ttft = time.perf_counter() - start
                text.extend(pieces)
                report = (chunk.get("speculative") or {}).get("report") or report
                if chunk.get("usage"):
                    tokens = chunk["usage"]["completion_tokens"]
    except httpx.HTTPError as exc:
        return RequestResult(0, ttft, time.perf_counter() - start, tokens, f"{type(exc).__name__}: {exc}",
                             "".join(text), replica)
    return RequestResult(200, ttft, time.perf_counter() - start, tokens, None, "".join(text), replica,
                         report.get("mean_draft_ms"), report.get("mean_verify_ms"))


async def follow_up_request(client: httpx.AsyncClient, body: dict[str, Any]) -> RequestResult:
    """``body``'s conversation, then its next turn: the second turn's result."""
    first = await one_request(client, body)
    if first.status != 200 or first.error is not None:
        return first
    messages = [*body["messages"], {"role": "assistant", "content": first.text}, {"role": "user", "content": FOLLOW_UP}]
    second = await one_request(client, {**body, "messages": messages})
    return dataclasses.replace(second, first_replica=first.replica)


async def run_level(url: str, api_key: str | None, bodies: Sequence[dict[str, Any]], concurrency: int,
                    timeout: float, follow_up: bool = False) -> tuple[LevelSummary, list[RequestResult]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=concurrency)
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, limits=limits,
                                 timeout=httpx.Timeout(timeout)) as client:

        async def gated(body: dict[str, Any]) -> RequestResult:
            async with gate:
                return await (follow_up_request if follow_up else one_request)(client, body)

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


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _paired_ratio(results: Sequence[RequestResult], first: Sequence[RequestResult], value: str) -> float | None:
    """The median over requests of ``value`` here over ``value`` on the first server, for the same request."""
    ratios = []
    for mine, theirs in zip(results, first, strict=True):
        a, b = getattr(mine, value), getattr(theirs, value)
        if a is not None and b:
            ratios.append(a / b)
    return statistics.median(ratios) if ratios else None


def format_paired(results: dict[str, list[RequestResult]]) -> str:
    """Each server's per-request figures, and the paired ratios to the first server's for the same requests."""

    def show(value: float | None, fmt: str) -> str:
        return "–" if value is None else format(value, fmt)

    lines = [("| server | requests | TTFT median ms | decode tok/s median | draft ms/step | verify ms/step | "
             "TTFT vs first | decode tok/s vs first |"), "|---|---|---|---|---|---|---|---|"]
    first = next(iter(results.values()))
    for url, rows in results.items():
        ttft = _median([r.ttft_s * 1000 if r.ttft_s is not None else None for r in rows])
        lines.append(f"| {url} | {len(rows)} | {show(ttft, '.0f')} | {show(_median([r.decode_tok_s for r in rows]), '.2f')} "
                     f"| {show(_median([r.draft_ms for r in rows]), '.1f')} | {show(_median([r.verify_ms for r in rows]), '.1f')} "
                     f"| {show(_paired_ratio(rows, first, 'ttft_s'), '.3f')}x "
                     f"| {show(_paired_ratio(rows, first, 'decode_tok_s'), '.3f')}x |")
    return "\n".join(lines)


def format_follow_ups(results: dict[str, list[RequestResult]]) -> str:
    """Second turns: how long their first token took, and how many left their first turn's replica."""
    lines = ["| server, level | follow-up turns | TTFT p50 / p95 ms | moved to another replica |", "|---|---|---|---|"]
    for url, rows in results.items():
        ms = [1000 * r.ttft_s for r in rows if r.ttft_s is not None and r.error is None]
        named = [r for r in rows if r.replica is not None and r.first_replica is not None]
        moved = f"{sum(r.replica != r.first_replica for r in named)} of {len(named)}" if named else "–"
        p50, p95 = percentile(ms, 0.5), percentile(ms, 0.95)
        lines.append(f"| {url} | {len(rows)} | {p50 or 0:.0f} / {p95 or 0:.0f} | {moved} |")
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
    parser.add_argument("--url", action="append", default=None,
                        help="a running specdec-serve (default http://127.0.0.1:8000); repeat to compare servers")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--concurrency", default="1,2,4,8", help="comma-separated client counts")
    parser.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--mode", default=None, help="speculative.mode for every request (default: the server's)")
    parser.add_argument("--prompts", type=Path, default=None, help="JSONL prompt suite (default: the bundled one)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one request may take")
    parser.add_argument("--out", type=Path, default=None, help="also write every request's result as JSONL")
    parser.add_argument("--follow-up", action="store_true",
                        help="time each conversation's second turn, sent after its first")
    args = parser.parse_args(argv)
    args.url = [url.rstrip("/") for url in (args.url or ["http://127.0.0.1:8000"])]
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
        models = httpx.get(f"{args.url[0]}/v1/models", headers=headers, timeout=10)
        models.raise_for_status()
        model = models.json()["data"][0]["id"]
        bodies = request_bodies(model, args.prompts or default_suite_path(), args.requests, args.max_tokens,
                                {"mode": args.mode} if args.mode else {})
    except (httpx.HTTPError, KeyError, IndexError) as exc:
        print(f"specdec-bench serve: error: cannot use the server at {args.url[0]}: {exc}", file=sys.stderr)
        return 2
    except SuiteError as exc:
        print(f"specdec-bench serve: error: {exc}", file=sys.stderr)
        return 2
    levels: dict[str, list[LevelSummary]] = {url: [] for url in args.url}
    results: dict[str, list[RequestResult]] = {url: [] for url in args.url}
    by_level: dict[str, list[RequestResult]] = {}
    rows: list[dict[str, Any]] = []
    for n, concurrency in enumerate(args.levels):
        # Side by side: every server runs the level in turn, the first one alternating.
        order = args.url if n % 2 == 0 else list(reversed(args.url))
        for url in order:
            summary, level_results = asyncio.run(run_level(url, args.api_key, bodies, concurrency, args.timeout,
                                                           args.follow_up))
            levels[url].append(summary)
            results[url].extend(level_results)
            by_level[f"{url}, {concurrency} clients"] = level_results
            rows.extend({"url": url, "concurrency": concurrency, **dataclasses.asdict(r)} for r in level_results)
            print(f"{url}, {concurrency} clients: {summary.completed}/{len(bodies)} completed, "
                  f"{summary.errors} errors, {summary.tokens_per_s:.1f} tok/s", file=sys.stderr)
    turn = "second turns of " if args.follow_up else ""
    print(f"model {model}, {args.requests} {turn}requests per level, max_tokens {args.max_tokens}, greedy")
    for url in args.url:
        if len(args.url) > 1:
            print(f"\n{url}")
        print(format_levels(levels[url]))
    if len(args.url) > 1:
        print("\nPaired, request by request (ratios are medians over the same requests):")
        print(format_paired(results))
    if args.follow_up:
        print()
        print(format_follow_ups(by_level))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"rows: {args.out}")
    return 1 if any(s.errors for summaries in levels.values() for s in summaries) else 0
