"""specdec-models: list, fetch, verify, prune and remove the models in the cache."""

from __future__ import annotations

import argparse
import sys

from specdec_tui.config import SettingsError, add_settings_flags, describe_settings, settings_from_args
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.errors import ModelError
from specdec_tui.models.loader import drop_preset_gguf, local_source
from specdec_tui.models.presets import PRESETS
from specdec_tui.models.reference import parse_ref
from specdec_tui.terminal_progress import TerminalProgress


def _size(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def cmd_list(cache: ModelCache, names: list[str]) -> int:
    print(f"cache: {cache.root}")
    print("presets:")
    for preset in PRESETS.values():
        state = cache.check(preset.name)
        shown = "cached" if state is None else "packed only" if packed_entries(cache, preset.name) else state
        print(f"  {preset.name:<22} {shown:<14} {preset.description}")
    packed = [key for key in cache.entries() if key not in PRESETS]
    if packed:
        print("packed for loading (made at the first load of each model, role and precision):")
        for key in packed:
            state = cache.check(key)
            shown = f"ok, {_size(cache.entry(key).bytes)}" if state is None else state
            print(f"  {key:<48} {shown:<14} {cache.entry(key).source.get('packed_from', '')}")
    return 0


def cmd_fetch(cache: ModelCache, names: list[str]) -> int:
    progress = TerminalProgress()
    try:
        for name in names:
            source = local_source(parse_ref(name), cache, progress)
            progress.close()
            print(f"{name}: ready in {source}")
    finally:
        progress.close()
    return 0


def cmd_verify(cache: ModelCache, names: list[str]) -> int:
    failed = 0
    for name in names or cache.entries():
        key = parse_ref(name).cache_key if name not in cache.entries() else name
        problem = cache.check(key, full=True)
        if problem is None:
            print(f"{name}: ok ({_size(cache.entry(key).bytes)}, every file matches its sha256)")
        else:
            failed += 1
            print(f"{name}: {problem}; run `specdec-models fetch {name}` to rebuild it")
    return 1 if failed else 0


def packed_entries(cache: ModelCache, key: str) -> list[str]:
    """The packed entries made from cache entry ``key`` (they are named after it)."""
    return [entry for entry in cache.entries() if entry.startswith(f"{key}.")]


def cmd_prune(cache: ModelCache, names: list[str]) -> int:
    for name in names or list(PRESETS):
        if parse_ref(name).kind != "preset":
            raise ModelError(f"{name} is not a preset; prune removes presets' GGUF files")
        if cache.check(name) == "not cached":
            print(f"{name}: no GGUF cached")
        elif not packed_entries(cache, name):
            print(f"{name}: kept (nothing is packed from it yet)")
        else:
            drop_preset_gguf(cache, name, lambda event: None)
            print(f"{name}: GGUF removed; its packed entries stay")
    return 0


def cmd_remove(cache: ModelCache, names: list[str]) -> int:
    for name in names:
        key = name if name in cache.entries() else parse_ref(name).cache_key
        # A model's packed entries go with it.
        removed = [entry for entry in cache.entries() if entry == key] + packed_entries(cache, key)
        for entry in removed:
            cache.remove(entry)
        print(f"{name}: {f'removed ({len(removed)} entries)' if removed else 'was not cached'}")
    return 0


COMMANDS = {"list": cmd_list, "fetch": cmd_fetch, "verify": cmd_verify, "prune": cmd_prune, "remove": cmd_remove}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdec-models", description=__doc__)
    parser.add_argument("command", choices=COMMANDS, help="what to do")
    parser.add_argument("names", nargs="*", help="presets, .gguf files or cache entries "
                        "(fetch: default the configured draft and target; prune: default every preset)")
    add_settings_flags(parser, only=("models",))
    args = parser.parse_args(argv)
    try:
        settings, origins = settings_from_args(args)
        if args.show_settings:
            print(describe_settings(settings, origins))
            return 0
        cache = ModelCache(settings.models.cache_dir)
        names = args.names
        if args.command == "fetch" and not names:
            names = [settings.models.draft, settings.models.target]
        if args.command == "remove" and not names:
            parser.error("remove needs the names of the models to remove")
        return COMMANDS[args.command](cache, names)
    except (ModelError, SettingsError) as exc:
        print(f"specdec-models: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec-models: interrupted; nothing half-written is kept", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
