"""specdec-tui: chat with a local model pair, sped up by speculative decoding."""

from __future__ import annotations

import argparse
import os
import sys

from specdec_tui.config import add_settings_flags, settings_or_exit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec-tui", description=__doc__)
    add_settings_flags(parser)
    remote = parser.add_argument_group("a running specdec-serve instead of models in this process")
    remote.add_argument("--server", metavar="URL", help="chat with specdec-serve at URL (e.g. http://127.0.0.1:8000)")
    remote.add_argument("--api-key", help="the server's API key, if it has one (default: $SPECDEC_API_KEY)")
    args = parser.parse_args(argv)
    settings = settings_or_exit(args, parser.prog)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    from specdec_tui.tui.app import SpecDecApp, load_in_process

    load = load_in_process if args.server is None else remote_loader(args.server, args.api_key)
    SpecDecApp(settings, load=load).run()
    return 0


def remote_loader(url: str, api_key: str | None):  # type: ignore[no-untyped-def]
    from specdec_tui.client import RemoteSource

    key = api_key or os.environ.get("SPECDEC_API_KEY")
    return lambda settings, progress: RemoteSource(url, key).connect(progress)


if __name__ == "__main__":
    sys.exit(main())
