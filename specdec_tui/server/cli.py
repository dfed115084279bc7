"""specdec-serve: an OpenAI-compatible HTTP server on the speculative decoding engine."""

from __future__ import annotations

import argparse
import ipaddress
import sys
import threading

from specdec_tui.config import Settings, SettingsError, add_settings_flags, settings_or_exit


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec-serve", description=__doc__)
    parser.add_argument("--ray", action="store_true",
                        help="serve from engine replicas on a Ray cluster (the [ray] settings; needs the ray extra)")
    add_settings_flags(parser, only=("models", "decoding", "server", "telemetry", "tracking", "resilience", "ray"))
    args = parser.parse_args(argv)
    settings = settings_or_exit(args, parser.prog)
    server = settings.server
    if not is_loopback(server.host) and server.api_key is None:
        print(f"specdec-serve: warning: listening on {server.host} with no API key: anyone who can reach "
              "this address can use the models (set server.api_key)", file=sys.stderr)
    if args.ray:
        try:
            from specdec_tui.scaleout.launch import serve_on_ray
        except ImportError as exc:
            print(f"specdec-serve: error: --ray needs Ray Serve ({exc}); install the ray extra: "
                  "pip install -e '.[ray]'", file=sys.stderr)
            return 2
        return serve_on_ray(settings)
    return serve(settings)


def serve(settings: Settings) -> int:
    import uvicorn
    from transformers.utils import logging as hf_logging

    from specdec_tui.observability.setup import observers_from_settings
    from specdec_tui.server.app import ServerState, create_app

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        observers = observers_from_settings(settings)
    except SettingsError as exc:
        print(f"specdec-serve: error: {exc}", file=sys.stderr)
        return 2
    state = ServerState(settings, observers)
    config = uvicorn.Config(create_app(state), host=settings.server.host, port=settings.server.port,
                            log_level="info", timeout_graceful_shutdown=5)
    http = uvicorn.Server(config)

    def load() -> None:
        from specdec_tui.models.errors import ModelError
        from specdec_tui.runtime import load_runtime
        from specdec_tui.terminal_progress import TerminalProgress

        progress = TerminalProgress()
        try:
            runtime = load_runtime(settings, progress, observers)
        except (ModelError, OSError, ValueError) as exc:
            state.failed(str(exc))
            print(f"specdec-serve: error: {exc}", file=sys.stderr)
            http.should_exit = True
            return
        finally:
            progress.close()
        state.ready(runtime)
        print(f"specdec-serve: ready: {runtime.target_name} <- {runtime.draft_name or 'no draft'}, "
              f"http://{settings.server.host}:{settings.server.port}/v1", file=sys.stderr)

    threading.Thread(target=load, name="specdec-load", daemon=True).start()
    http.run()
    return 1 if state.load_error else 0


if __name__ == "__main__":
    sys.exit(main())
