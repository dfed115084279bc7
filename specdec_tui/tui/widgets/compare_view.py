"""Two runs of one prompt side by side: speculative against target-only."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Label, Static

from specdec_tui.engine.cached_model import first_difference
from specdec_tui.engine.metrics import RunSummary

#: How the first differing token, and what follows it, are shown.
MARK = "reverse bold"
AFTER = "italic"


@dataclass(frozen=True)
class CompareRun:
    label: str
    summary: RunSummary
    token_ids: tuple[int, ...]
    text: str
    #: Each token's text, as it streamed.
    pieces: tuple[str, ...] = ()


class CompareView(Vertical):
    def __init__(self, first: CompareRun, second: CompareRun) -> None:
        super().__init__(classes="compare")
        self.first, self.second = first, second

    @property
    def speculative(self) -> CompareRun:
        return self.first if self.first.summary.mode != "target" else self.second

    @property
    def target(self) -> CompareRun:
        return self.second if self.first.summary.mode != "target" else self.first

    @property
    def speedup(self) -> float:
        base = self.target.summary.tokens_per_s
        return self.speculative.summary.tokens_per_s / base if base else 0.0

    @property
    def difference(self) -> int | None:
        return first_difference(self.speculative.token_ids, self.target.token_ids)

    def verdict(self) -> str:
        if self.difference is None:
            return f"identical text ({len(self.target.token_ids)} tokens) · speedup {self.speedup:.2f}x"
        return f"texts differ from token {self.difference} on · speedup {self.speedup:.2f}x"

    def marked(self, run: CompareRun) -> Text:
        """The run's text; where the two differ, the first differing token is marked and the rest dimmed."""
        text = Text()
        pieces = run.pieces or (run.text,)
        difference = self.difference
        # A token that ends inside a character streams as ""; the mark goes on the first one shown.
        mark = next((i for i in range(difference, len(pieces)) if pieces[i]), None) if difference is not None else None
        for i, piece in enumerate(pieces):
            if difference is None or i < difference:
                text.append(piece)
            else:
                text.append(piece, style=MARK if i == mark else AFTER)
        return text

    def compose(self) -> ComposeResult:
        table = Table(expand=True, show_edge=False, pad_edge=False)
        table.add_column("")
        for run in (self.first, self.second):
            table.add_column(run.label, justify="right")
        a, b = self.first.summary, self.second.summary
        rows = (
            ("tokens/s", f"{a.tokens_per_s:.2f}", f"{b.tokens_per_s:.2f}"),
            ("tokens", str(a.new_tokens), str(b.new_tokens)),
            ("seconds", f"{a.seconds:.1f}", f"{b.seconds:.1f}"),
            ("acceptance", *(f"{s.acceptance_rate:.0%}" if s.acceptance_rate is not None else "–" for s in (a, b))),
            ("TTFT", f"{a.ttft_s * 1000:.0f} ms", f"{b.ttft_s * 1000:.0f} ms"),
        )
        for row in rows:
            table.add_row(*row)
        yield Label("Compare", classes="compare--title")
        yield Static(table)
        with Horizontal(classes="compare--texts"):
            for run in (self.first, self.second):
                with Vertical(classes="compare--side"):
                    yield Label(run.label, classes="compare--label")
                    yield Static(self.marked(run), classes="compare--text")
        yield Label(self.verdict(), classes="compare--verdict " + ("-same" if self.difference is None else "-diff"))
