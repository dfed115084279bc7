"""Model fetch / packing / loading progress, shown in the app while it happens."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, ProgressBar

from specdec_tui.models.progress import Progress

STAGE_TITLES = {
    "download": "Downloading",
    "assemble": "Assembling and checking",
    "convert": "Converting (once)",
    "load": "Loading",
    "prepare": "Packing weights",
    "rebuild": "Rebuilding",
}


class LoadingPanel(Vertical):
    def compose(self) -> ComposeResult:
        yield Label("Starting…", id="loading-title")
        yield ProgressBar(total=None, show_eta=False, id="loading-bar")
        yield Label("", id="loading-detail")

    def show(self, progress: Progress) -> None:
        title = STAGE_TITLES.get(progress.stage, progress.stage.title())
        self.query_one("#loading-title", Label).update(f"{title} {progress.model}")
        bar = self.query_one("#loading-bar", ProgressBar)
        bar.update(total=progress.total, progress=progress.done)
        self.query_one("#loading-detail", Label).update(progress.detail)

    def fail(self, message: str) -> None:
        self.add_class("-failed")
        self.query_one("#loading-title", Label).update("Could not load the models")
        self.query_one("#loading-bar", ProgressBar).display = False
        self.query_one("#loading-detail", Label).update(message)
