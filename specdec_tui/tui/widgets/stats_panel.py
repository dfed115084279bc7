"""The side panel: what the draft is doing for the current reply, live, and the knobs in force."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Label, Sparkline, Static

from specdec_tui.engine.metrics import RunSummary, StepRecord, position_acceptance

RECENT_STEPS = 40
BAR_WIDTH = 12


@dataclass(frozen=True)
class Knobs:
    mode: str
    k: int
    tau: float
    temperature: float
    target: str
    draft: str


def _fmt(value: float | None, pattern: str) -> str:
    return "–" if value is None else pattern.format(value)


def position_bars(records: Sequence[StepRecord]) -> Text:
    text = Text()
    for i, share in enumerate(position_acceptance(records), start=1):
        filled = round(share * BAR_WIDTH)
        text.append(f"{i:>2} ")
        text.append("█" * filled, style="bold")
        text.append("░" * (BAR_WIDTH - filled), style="dim")
        text.append(f" {share:4.0%}\n")
    return text


class StatsPanel(VerticalScroll):
    def compose(self) -> ComposeResult:
        yield Label("Settings", classes="panel--title")
        yield Static(id="knobs")
        yield Label("This reply", classes="panel--title")
        yield Static(id="live")
        yield Label("tokens/s per step", classes="panel--caption")
        yield Sparkline([], id="speed-line")
        yield Label("acceptance per step", classes="panel--caption")
        yield Sparkline([], id="accept-line")
        yield Label("accepted by draft position", classes="panel--caption")
        yield Static(id="positions")

    def on_mount(self) -> None:
        self.query_one("#live", Static).update("no reply yet")

    def show_knobs(self, knobs: Knobs) -> None:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim")
        table.add_column()
        for name, value in (("mode", knobs.mode), ("K", str(knobs.k)), ("tau", f"{knobs.tau:g}"),
                            ("temp", f"{knobs.temperature:g}"), ("target", knobs.target), ("draft", knobs.draft)):
            table.add_row(name, value)
        self.query_one("#knobs", Static).update(table)

    def show_run(self, summary: RunSummary, records: Sequence[StepRecord]) -> None:
        table = Table.grid(padding=(0, 1))
        table.add_column(style="dim")
        table.add_column()
        last = records[-1] if records else None
        rows = (
            ("tokens/s", _fmt(summary.tokens_per_s, "{:.1f}")),
            ("accept", _fmt(summary.acceptance_rate, "{:.0%}")),
            ("acc/step", _fmt(summary.mean_accepted if summary.drafted else None, "{:.2f}")),
            ("tok/step", _fmt(summary.tokens_per_step, "{:.2f}")),
            ("TTFT", _fmt(summary.ttft_s * 1000 if summary.ttft_s else None, "{:.0f} ms")),
            ("draft", _fmt(last.draft_s * 1000 if last else None, "{:.0f} ms") + f"  (avg {summary.mean_draft_ms:.0f})"),
            ("verify", _fmt(last.verify_s * 1000 if last else None, "{:.0f} ms") + f"  (avg {summary.mean_verify_ms:.0f})"),
            ("tokens", str(summary.new_tokens)),
        )
        for name, value in rows:
            table.add_row(name, value)
        self.query_one("#live", Static).update(table)
        recent = records[-RECENT_STEPS:]
        self.query_one("#speed-line", Sparkline).data = [r.emitted / r.seconds if r.seconds else 0.0 for r in recent]
        self.query_one("#accept-line", Sparkline).data = [r.accepted / r.drafted if r.drafted else 0.0 for r in recent]
        self.query_one("#positions", Static).update(position_bars(records))
