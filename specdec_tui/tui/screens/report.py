"""The speculation report of one reply: why it sped up, or did not.

The reply's tokens coloured by origin, acceptance by draft position, how many drafted tokens each
step kept, where the time went, and every place the draft went wrong: the token it proposed next
to the one the target wrote instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from specdec_tui.engine.decoder import Origin, StepEvent
from specdec_tui.engine.metrics import RunSummary, acceptance_histogram
from specdec_tui.tui.widgets.stats_panel import position_bars

BAR_WIDTH = 24
#: Characters of the reply shown before each rejection.
CONTEXT_CHARS = 40


def rejections(steps: Sequence[StepEvent]) -> list[tuple[int, str, str, str]]:
    """(step number, the text just before, what the draft proposed, what the target wrote instead)."""
    rows = []
    written = ""
    for number, step in enumerate(steps, start=1):
        kept = "".join(t.text for t in step.tokens[: step.record.accepted])
        if step.rejected is not None:
            before = (written + kept)[-CONTEXT_CHARS:]
            rows.append((number, before, step.rejected.text, step.tokens[step.record.accepted].text))
        written += "".join(t.text for t in step.tokens)
    return rows


def _shown(text: str) -> str:
    return repr(text)[1:-1] or "∅"


class ReportScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q", "dismiss", "Close")]

    def __init__(self, title: str, summary: RunSummary, steps: Sequence[StepEvent], draft_style: str,
                 target_style: str, degraded_style: str = "italic underline red") -> None:
        super().__init__()
        self.title_text, self.summary, self.steps = title, summary, list(steps)
        self.draft_style, self.target_style = draft_style, target_style
        self.origin_styles = {Origin.DRAFT: draft_style, Origin.TARGET: target_style, Origin.DEGRADED: degraded_style}

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="report"):
            yield Label(self.title_text, id="report-title")
            yield Label("The reply: drafted and kept / the target's own"
                        + (" / the draft's alone, unverified" if self.summary.degraded else ""), classes="report-heading")
            yield Static(self.reply_text(), id="report-reply")
            yield Label("Kept, by draft position", classes="report-heading")
            yield Static(position_bars([s.record for s in self.steps]) or "nothing was drafted", id="report-positions")
            yield Label("Steps, by drafted tokens kept", classes="report-heading")
            yield Static(self.histogram(), id="report-histogram")
            yield Label("Where the time went", classes="report-heading")
            yield Static(self.timing(), id="report-timing")
            yield Label("Where the draft went wrong", classes="report-heading")
            yield Static(self.rejection_table(), id="report-rejections")
            yield Label("Esc to close", id="report-hint")

    def reply_text(self) -> Text:
        text = Text()
        for step in self.steps:
            for token in step.tokens:
                text.append(token.text, style=self.origin_styles[token.origin])
        return text

    def histogram(self) -> Text | str:
        counts = acceptance_histogram([s.record for s in self.steps])
        if not counts:
            return "no step drafted anything"
        most = max(counts)
        text = Text()
        for kept, count in enumerate(counts):
            text.append(f"kept {kept:>2}  ")
            text.append("█" * round(BAR_WIDTH * count / most) if most else "", style="bold")
            text.append(f" {count}\n")
        return text

    def timing(self) -> Table:
        records = [s.record for s in self.steps]
        draft = sum(r.draft_s for r in records)
        verify = sum(r.verify_s for r in records)
        total = draft + verify or 1.0
        table = Table.grid(padding=(0, 2))
        table.add_row("drafting", f"{1000 * draft:.0f} ms", f"{draft / total:.0%}")
        table.add_row("verifying", f"{1000 * verify:.0f} ms", f"{verify / total:.0%}")
        table.add_row("steps", str(len(records)), f"{self.summary.tokens_per_step:.2f} tokens per step")
        return table

    def rejection_table(self) -> Table | str:
        rows = rejections(self.steps)
        if not rows:
            return "the target accepted every drafted token"
        table = Table(box=None, padding=(0, 1), header_style="bold")
        for column in ("step", "…before", "draft proposed", "target wrote"):
            table.add_column(column)
        for number, before, proposed, wrote in rows:
            table.add_row(str(number), _shown(before), Text(_shown(proposed), style=self.draft_style),
                          Text(_shown(wrote), style=self.target_style))
        return table
