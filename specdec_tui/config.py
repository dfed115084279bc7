"""Settings: defaults < TOML config file < environment (SPECDEC_*, ``__`` nesting) < command line.

The file is ``config.toml`` in the user's config folder unless SPECDEC_CONFIG (or ``--config``)
names another. Its tables mirror the groups below::

    [decoding]
    k = 8
    tau = 1.0

    [models]
    target = "qwen2.5-coder-1.5b"

and the same value from the environment is ``SPECDEC_DECODING__K=8``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from specdec_tui.engine.modes import DRAFTER_MODES, check_mode
from specdec_tui.models.presets import DEFAULT_DRAFT, DEFAULT_TARGET
from specdec_tui.tui.keys import KEY_IDS, check_keymap, effective_keys

APP = "specdec-tui"
ENV_PREFIX = "SPECDEC_"
CONFIG_ENV = "SPECDEC_CONFIG"

#: The file ``load_settings`` reads; None means SPECDEC_CONFIG or the default path.
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("specdec_config_file", default=None)

PrecisionName = Literal["fp32", "fp16", "bf16", "int8", "int4"]
KvCacheName = Literal["float16", "float32"]


class SettingsError(ValueError):
    """Settings that cannot be used; the message is one line naming the value and its source."""


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP)) / "config.toml"


class ModelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str = Field(DEFAULT_TARGET, description="target model: preset, folder, .gguf file or hub id")
    draft: str = Field(DEFAULT_DRAFT, description="draft model, sharing the target's tokenizer")
    precision: PrecisionName = Field("int8", description="target weights; every choice is lossless")
    draft_precision: PrecisionName = Field("int4", description="draft weights")
    draft_head_tokens: int | None = Field(
        0, ge=0, description="draft output head computes only the ids below N and those of the conversation "
        "(cheaper draft steps, fewer accepted); 0 = all"
    )
    draft_window: int = Field(
        2048, ge=0, description="of a context longer than N + 1056 tokens the draft reads only its first 32 and "
        "its latest N to N + 1024, cheaper tokens and a cache that stops growing (the replies stay the target's; "
        "a draft on the package's own forward); 0 = all of it"
    )
    kv_cache: KvCacheName = Field(
        "float32", description="keys and values kept per position: float32, or float16 (half the memory, other numbers)"
    )
    draft_kv_cache: KvCacheName | None = Field(
        None, description="the draft's keys and values, where not kv_cache's: float16 alone halves the draft's memory "
        "and keeps the replies the target's (the draft only proposes)"
    )
    lean_target: bool = Field(
        False, description="target keeps only the 4-bit form of its Q4_K weights (AVX-512 VNNI): "
        "about 1.1 GB less memory, slower verify passes"
    )
    memory_budget_gb: float = Field(
        3.0, ge=0, description="resident memory to stay under: before a reply could pass it, the target drops "
        "its int8 blocks as lean_target does (AVX-512 VNNI; slower long passes), then the draft keeps its cache "
        "in float16 (the same replies either way); 0 = none"
    )
    device: str = Field("auto", description="auto, cpu or cuda")
    cache_dir: Path = Field(Path(platformdirs.user_cache_dir(APP)), description="presets' GGUF files and packed weights")

    @property
    def draft_cache(self) -> KvCacheName:
        """What the draft's cache keeps per position: ``draft_kv_cache``, where given, else ``kv_cache``."""
        return self.draft_kv_cache or self.kv_cache


class DecodingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    drafter: str = Field("hybrid", description=f"who drafts: {', '.join(DRAFTER_MODES)}")
    k: int = Field(8, ge=1, le=32, description="most tokens drafted per step")
    tau: float = Field(1.0, gt=0.0, le=1.0, description="1 = lossless; lower accepts more drafts")
    temperature: float = Field(0.0, ge=0.0, description="0 = greedy")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus sampling mass")
    max_new_tokens: int = Field(512, ge=1, description="reply length limit")
    seed: int | None = Field(0, description="sampling seed; empty for a fresh one each reply")
    adaptive_k: bool = Field(True, description="draft fewer than K tokens when that is faster (never more)")
    draft_min_confidence: float = Field(0.0, ge=0.0, le=1.0, description="stop drafting below this")
    lookup_k: int = Field(8, ge=0, le=32, description="most tokens a prompt-lookup copy proposes per step "
                          "(0: k); a copy costs nothing to draft")

    @field_validator("drafter")
    @classmethod
    def _known_drafter(cls, name: str) -> str:
        return check_mode(name, DRAFTER_MODES)


class ChatSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    system_prompt: str = Field("You are a helpful assistant.", description="first message of every chat")
    history_path: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir(APP)) / "history.sqlite",
        description="SQLite chat history",
    )
    theme: str = Field("specdec-dark", description="a theme from themes/")


class ServerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = Field("127.0.0.1", description="address specdec-serve listens on (loopback by default)")
    port: int = Field(8000, ge=0, le=65535, description="port specdec-serve listens on (0: any free port)")
    api_key: str | None = Field(None, min_length=1, description="if set, every endpoint but /health needs "
                                "Authorization: Bearer <key>")
    queue_size: int = Field(8, ge=0, le=10000, description="requests that may wait while one is decoded")
    request_timeout: float = Field(60.0, gt=0, description="seconds a request may wait in the queue")


class TelemetrySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="export OpenTelemetry traces and metrics of every reply")
    exporter: Literal["otlp", "console", "none"] = Field("otlp", description="otlp (HTTP), console or none")
    endpoint: str | None = Field(None, description="OTLP/HTTP base URL (default: $OTEL_EXPORTER_OTLP_ENDPOINT "
                                 "or http://localhost:4318)")
    service_name: str = Field("specdec-tui", min_length=1, description="service.name ($OTEL_SERVICE_NAME wins)")
    step_spans: bool = Field(True, description="a span per decoding step (off for long replies)")


class TrackingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mlflow_uri: str | None = Field(None, description="log every chat and server reply to this MLflow tracking URI "
                                   "('default': a SQLite file in the data folder)")
    experiment: str = Field("specdec-chat", min_length=1, description="MLflow experiment of chat replies")


class ResilienceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    fail_max: int = Field(3, ge=1, le=1000, description="failed passes in a row that open a model's circuit")
    reset_timeout: float = Field(30.0, gt=0, description="seconds an open circuit waits before one trial pass")
    step_timeout: float = Field(10.0, ge=0, description="a decoding pass slower than this (seconds) counts as "
                                "failed; 0: no limit")


class RaySettings(BaseModel):
    """``specdec-serve --ray``: replicas of the engine behind one endpoint on a Ray cluster."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(None, description="Ray cluster to join (auto: the running one); empty: start "
                                "a local one")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of the local cluster (empty: all of them)")
    replicas: int | Literal["auto"] = Field(1, description="engine replicas, or auto to scale between "
                                             "min_replicas and max_replicas")
    min_replicas: int = Field(1, ge=0, description="with replicas = auto: the fewest replicas")
    max_replicas: int = Field(4, ge=1, description="with replicas = auto: the most replicas")
    target_ongoing_requests: float = Field(1.0, gt=0, description="with replicas = auto: requests per replica "
                                           "the autoscaler aims at")
    cpus_per_replica: float = Field(1.0, gt=0, description="CPUs each replica reserves (and its torch threads)")
    gpus_per_replica: float = Field(0.0, ge=0, description="GPUs each replica reserves (1 with models.device "
                                    "= cuda: a replica per GPU)")
    max_ongoing_requests: int = Field(1, ge=1, description="requests a replica takes at once (its engine "
                                      "decodes one; more wait in its own queue)")
    affinity: bool = Field(True, description="send a conversation's turns to the replica holding its KV cache")
    front_replicas: int = Field(1, ge=1, description="replicas of the front that forwards requests (it holds no "
                                "model; more only for very high request rates)")
    draft_actor: bool = Field(False, description="run the draft model in its own actor, beside the replica")
    draft_cpus: float = Field(1.0, gt=0, description="with draft_actor: CPUs the draft actor reserves")

    @model_validator(mode="after")
    def _replica_bounds(self) -> RaySettings:
        if isinstance(self.replicas, int) and self.replicas < 1:
            raise ValueError("replicas must be at least 1, or auto")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) is above max_replicas ({self.max_replicas})")
        return self


Rate = Annotated[float, Field(ge=0.0, le=1.0)]


def parse_fault_spec(spec: str) -> dict[str, str]:
    """``"target.raise=0.2, draft.nan=0.1, seed=3"`` -> ``{"target_raise": "0.2", ...}``."""
    values = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{item!r} is not name=value (e.g. target.raise=0.2)")
        values[name.strip().replace(".", "_")] = value.strip()
    return values


class FaultSettings(BaseModel):
    """Fault injection, for tests and demonstrations; every rate is a per-pass probability."""

    model_config = ConfigDict(extra="forbid")

    target_raise: Rate = Field(0.0, description="FAULT INJECTION: share of target passes that raise")
    target_nan: Rate = Field(0.0, description="FAULT INJECTION: share of target passes that return NaN")
    target_hang: Rate = Field(0.0, description="FAULT INJECTION: share of target passes that hang")
    target_hang_ms: float = Field(3000.0, ge=0, description="how long an injected target hang lasts")
    draft_raise: Rate = Field(0.0, description="FAULT INJECTION: share of draft passes that raise")
    draft_nan: Rate = Field(0.0, description="FAULT INJECTION: share of draft passes that return NaN")
    draft_hang: Rate = Field(0.0, description="FAULT INJECTION: share of draft passes that hang")
    draft_hang_ms: float = Field(3000.0, ge=0, description="how long an injected draft hang lasts")
    seed: int = Field(0, description="seed of the injected faults")

    @model_validator(mode="before")
    @classmethod
    def _from_spec(cls, value: Any) -> Any:
        # SPECDEC_FAULTS="target.raise=0.2,draft.nan=0.1" sets several at once.
        return parse_fault_spec(value) if isinstance(value, str) else value

    @property
    def enabled(self) -> bool:
        return any(getattr(self, f"{model}_{fault}") > 0 for model in ("target", "draft")
                   for fault in ("raise", "nan", "hang"))

    def describe(self) -> str:
        """The faults that are on, e.g. ``target.raise=0.2, draft.nan=0.1``."""
        return ", ".join(f"{name.replace('_', '.', 1)}={value:g}" for name, value in self.model_dump().items()
                         if name.split("_")[-1] in ("raise", "nan", "hang") and value > 0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", nested_model_default_partial_update=True
    )

    models: ModelSettings = Field(default_factory=ModelSettings)
    decoding: DecodingSettings = Field(default_factory=DecodingSettings)
    chat: ChatSettings = Field(default_factory=ChatSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    telemetry: TelemetrySettings = Field(default_factory=TelemetrySettings)
    tracking: TrackingSettings = Field(default_factory=TrackingSettings)
    resilience: ResilienceSettings = Field(default_factory=ResilienceSettings)
    faults: Annotated[FaultSettings, NoDecode] = Field(default_factory=FaultSettings)
    ray: RaySettings = Field(default_factory=RaySettings)
    #: Key binding id -> key(s), e.g. ``compare = "f10"``: rebinds the chat's keys.
    keys: dict[str, str] = Field(default_factory=dict)

    @field_validator("keys")
    @classmethod
    def _known_bindings(cls, keymap: dict[str, str]) -> dict[str, str]:
        return check_keymap(keymap)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        path = _CONFIG_FILE.get() or config_path(os.environ)
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)


def config_path(environ: Mapping[str, str]) -> Path:
    return Path(environ[CONFIG_ENV]).expanduser() if environ.get(CONFIG_ENV) else default_config_path()


def field_paths() -> list[tuple[str, str]]:
    """Every setting as (group, name), in declaration order; ``keys`` has one per key binding."""
    return [
        (group, name)
        for group, info in Settings.model_fields.items()
        for name in (KEY_IDS if group == "keys" else info.annotation.model_fields)  # type: ignore[union-attr]
    ]


def setting_value(settings: Settings, group: str, name: str) -> Any:
    if group == "keys":
        return effective_keys(settings.keys)[name]
    return getattr(getattr(settings, group), name)


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's values, with unknown tables or keys reported by name."""
    try:
        values = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from exc
    known = {}
    for group, name in field_paths():
        known.setdefault(group, set()).add(name)
    for group, table in values.items():
        if group not in known:
            raise SettingsError(f"unknown table [{group}] in {path}; known tables: {', '.join(known)}")
        if not isinstance(table, dict):
            raise SettingsError(f"{group} in {path} must be a table: [{group}]")
        for name in table:
            if name not in known[group]:
                raise SettingsError(f"unknown key {group}.{name} in {path}")
    return values


def read_env(environ: Mapping[str, str]) -> dict[str, Any]:
    return EnvSettingsSource(Settings, env_prefix=ENV_PREFIX, env_nested_delimiter="__")()


def _leaves(values: Mapping[str, Any]) -> dict[str, Any]:
    return {
        f"{group}.{name}": value
        for group, table in values.items()
        for name, value in (_spec_or_nothing(table) if group == "faults" and isinstance(table, str)
                            else table if isinstance(table, Mapping) else {}).items()
    }


def _spec_or_nothing(spec: str) -> dict[str, str]:
    try:
        return parse_fault_spec(spec)
    except ValueError:
        return {}  # validating the settings reports it


def load_settings(
    cli: Mapping[str, Mapping[str, Any]] | None = None, config: Path | None = None
) -> tuple[Settings, dict[str, str]]:
    """Effective settings and, for each ``group.name``, where its value came from."""
    cli = {group: dict(values) for group, values in (cli or {}).items() if values}
    path = config if config is not None else config_path(os.environ)
    explicit = config is not None or bool(os.environ.get(CONFIG_ENV))
    if explicit and not path.is_file():
        raise SettingsError(f"config file {path} does not exist")
    layers = [
        ("default", {}),
        (f"file {path}", read_config_file(path) if path.is_file() else {}),
        ("env", read_env(os.environ)),
        ("command line", cli),
    ]
    origins = {key: "default" for key in (f"{g}.{n}" for g, n in field_paths())}
    for label, values in layers:
        spec = label == "env" and isinstance(values.get("faults"), str)
        for key in _leaves(values):
            origins[key] = (
                label if label != "env"
                else f"env {ENV_PREFIX}FAULTS" if spec and key.startswith("faults.")
                else f"env {ENV_PREFIX}{key.replace('.', '__').upper()}"
            )
    token = _CONFIG_FILE.set(path)
    try:
        settings = Settings(**cli)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, origins)) from None
    finally:
        _CONFIG_FILE.reset(token)
    return settings, origins


def _describe(exc: ValidationError, origins: Mapping[str, str]) -> str:
    error = exc.errors()[0]
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "extra_forbidden":
        return f"unknown setting {key} (from {origins.get(key, _env_or_cli(key))})"
    got = error.get("input")
    why = error["msg"].removeprefix("Value error, ")  # a validator's own message reads as it is
    return f"{key} = {got!r} (from {origins.get(key) or _env_or_cli(key)}): {why[0].lower()}{why[1:]}"


def _env_or_cli(key: str) -> str:
    env = f"{ENV_PREFIX}{key.replace('.', '__').upper()}"
    return f"env {env}" if env in os.environ else "command line"


def describe_settings(settings: Settings, origins: Mapping[str, str]) -> str:
    """One line per setting: ``group.name = value    # origin``."""
    lines = []
    for group, name in field_paths():
        value = setting_value(settings, group, name)
        shown = str(value) if isinstance(value, Path) else repr(value)
        if f"{group}.{name}" in SECRETS and value is not None:
            shown = "'***'"
        lines.append(f"{group}.{name} = {shown}".ljust(52) + f"  # {origins[f'{group}.{name}']}")
    if settings.faults.enabled:
        lines.append(f"# FAULT INJECTION IS ON: {settings.faults.describe()} (seed {settings.faults.seed})")
    return "\n".join(lines)


#: Command-line flag -> (group, name). Every flag maps onto one setting.
FLAGS: dict[str, tuple[str, str]] = {
    "--target": ("models", "target"),
    "--draft": ("models", "draft"),
    "--precision": ("models", "precision"),
    "--draft-precision": ("models", "draft_precision"),
    "--draft-head-tokens": ("models", "draft_head_tokens"),
    "--draft-window": ("models", "draft_window"),
    "--kv-cache": ("models", "kv_cache"),
    "--draft-kv-cache": ("models", "draft_kv_cache"),
    "--lean-target": ("models", "lean_target"),
    "--memory-budget-gb": ("models", "memory_budget_gb"),
    "--device": ("models", "device"),
    "--cache-dir": ("models", "cache_dir"),
    "--drafter": ("decoding", "drafter"),
    "--k": ("decoding", "k"),
    "--tau": ("decoding", "tau"),
    "--temperature": ("decoding", "temperature"),
    "--top-p": ("decoding", "top_p"),
    "--max-new-tokens": ("decoding", "max_new_tokens"),
    "--seed": ("decoding", "seed"),
    "--adaptive-k": ("decoding", "adaptive_k"),
    "--draft-min-confidence": ("decoding", "draft_min_confidence"),
    "--lookup-k": ("decoding", "lookup_k"),
    "--system-prompt": ("chat", "system_prompt"),
    "--history": ("chat", "history_path"),
    "--theme": ("chat", "theme"),
    "--host": ("server", "host"),
    "--port": ("server", "port"),
    "--api-key": ("server", "api_key"),
    "--queue-size": ("server", "queue_size"),
    "--request-timeout": ("server", "request_timeout"),
    "--telemetry": ("telemetry", "enabled"),
    "--otel-exporter": ("telemetry", "exporter"),
    "--otel-endpoint": ("telemetry", "endpoint"),
    "--step-spans": ("telemetry", "step_spans"),
    "--mlflow-uri": ("tracking", "mlflow_uri"),
    "--fail-max": ("resilience", "fail_max"),
    "--reset-timeout": ("resilience", "reset_timeout"),
    "--step-timeout": ("resilience", "step_timeout"),
    "--address": ("ray", "address"),
    "--replicas": ("ray", "replicas"),
    "--cpus-per-replica": ("ray", "cpus_per_replica"),
    "--draft-actor": ("ray", "draft_actor"),
}

#: Settings whose values ``describe_settings`` never prints.
SECRETS = frozenset({"server.api_key"})


def add_settings_flags(parser: argparse.ArgumentParser,
                       only: tuple[str, ...] = ("models", "decoding", "chat", "telemetry", "tracking",
                                                "resilience")) -> None:
    """Add ``--config``, ``--show-settings`` and one flag per setting in the ``only`` groups."""
    group = parser.add_argument_group("settings (override the config file and SPECDEC_* variables)")
    group.add_argument("--config", type=Path, help="TOML config file (default: $SPECDEC_CONFIG or "
                       f"{default_config_path()})")
    group.add_argument("--show-settings", action="store_true",
                       help="print the effective settings and where each came from, then exit")
    for flag, (section, name) in FLAGS.items():
        if section in only:
            info = Settings.model_fields[section].annotation.model_fields[name]  # type: ignore[union-attr]
            group.add_argument(flag, dest=f"{section}.{name}", metavar=name.upper(), help=info.description)


def nested_settings(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``group.name`` keys as nested groups (strings; pydantic converts); other keys and None values are skipped."""
    overrides: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if "." in key and value is not None:
            section, name = key.split(".", 1)
            overrides.setdefault(section, {})[name] = value
    return overrides


def cli_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The settings given on the command line, as nested groups."""
    return nested_settings(vars(args))


def settings_from_args(args: argparse.Namespace) -> tuple[Settings, dict[str, str]]:
    return load_settings(cli_overrides(args), config=args.config)


def settings_or_exit(args: argparse.Namespace, prog: str) -> Settings:
    """The settings a command line asks for. A bad value ends the program with its one-line error
    (status 2); ``--show-settings`` prints them all and ends it (status 0)."""
    try:
        settings, origins = settings_from_args(args)
    except SettingsError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    if args.show_settings:
        print(describe_settings(settings, origins))
        raise SystemExit(0)
    return settings
