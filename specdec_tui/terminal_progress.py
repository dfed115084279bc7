"""Model fetch / convert / load progress on a terminal: tqdm bars, or one line per stage in a log."""

from __future__ import annotations

import sys

from tqdm import tqdm

from specdec_tui.models.progress import Progress

UNITS = {"assemble": ("B", True), "download": ("wheel", False)}


class TerminalProgress:
    """A ``ProgressFn``: one bar per (model, stage) on stderr; plain lines when stderr is not a tty."""

    def __init__(self) -> None:
        self.interactive = sys.stderr.isatty()
        self.bar: tqdm | None = None
        self.key: tuple[str, str, str] | None = None

    def __call__(self, event: Progress) -> None:
        key = (event.model, event.stage, "" if event.total is not None else event.detail)
        if key != self.key:
            self.close()
            self.key = key
            if not self.interactive:
                print(f"{event.stage} {event.model}: {event.detail}".rstrip(": "), file=sys.stderr, flush=True)
                return
            unit, scale = UNITS.get(event.stage, ("step", False))
            self.bar = tqdm(total=event.total, desc=f"{event.stage} {event.model}", unit=unit,
                            unit_scale=scale, file=sys.stderr, dynamic_ncols=True)
        if self.bar is None:
            return
        if event.detail:
            self.bar.set_postfix_str(event.detail, refresh=False)
        if event.total is not None:
            self.bar.update(event.done - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar = None
        self.key = None
