"""specdec-tui: chat with a local model pair, sped up by speculative decoding."""

from __future__ import annotations

import argparse
import sys

from specdec_tui.config import SettingsError, add_settings_flags, describe_settings, settings_from_args


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec-tui", description=__doc__)
    add_settings_flags(parser)
    args = parser.parse_args(argv)
    try:
        settings, origins = settings_from_args(args)
    except SettingsError as exc:
        print(f"specdec-tui: error: {exc}", file=sys.stderr)
        return 2
    if args.show_settings:
        print(describe_settings(settings, origins))
        return 0
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    from specdec_tui.tui.app import SpecDecApp

    SpecDecApp(settings).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
