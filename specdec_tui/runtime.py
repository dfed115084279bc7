"""The composition point: settings -> model pair -> ``Engine``; chat messages -> prompt ids ->
``DecodeParams``; a finished reply -> the summary stored with it.

Every front end (the TUI, the bench, the server) builds its running system here, so a setting
added once reaches all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

from specdec_tui.chat.template import render_prompt
from specdec_tui.config import DecodingSettings, FaultSettings, ResilienceSettings, Settings
from specdec_tui.engine.cached_model import Runner
from specdec_tui.engine.decoder import DecodeParams, Event
from specdec_tui.engine.faults import FaultRates, FaultyRunner, random_faults
from specdec_tui.engine.metrics import RunSummary
from specdec_tui.engine.modes import MODES, TARGET
from specdec_tui.engine.resilience import Breaker, Breakers, GuardedRunner
from specdec_tui.engine.session import Engine
from specdec_tui.models.budget import MemoryBudget
from specdec_tui.models.cache import ModelCache
from specdec_tui.models.loader import ModelPair, load_draft, load_pair
from specdec_tui.models.progress import ProgressFn, no_progress
from specdec_tui.observability.events import ReplyInfo
from specdec_tui.observability.setup import Observers, observers_from_settings

Message = Mapping[str, str]


class ReplySource(Protocol):
    """What a chat front end needs: stream a reply to a conversation. In process or over HTTP."""

    target_name: str
    #: None when no draft model is loaded (only target-only and prompt lookup work).
    draft_name: str | None
    #: What the memory budget last did to keep the process under it (one line), or None.
    memory_note: str | None

    def reply(self, messages: Sequence[Message], params: DecodeParams, mode: str,
              cancel: threading.Event | None = None, fresh: bool = False,
              conversation_id: str | None = None) -> Iterator[Event]:
        """Events of one reply to ``messages``; ``fresh`` starts from empty caches (for fair compares)."""
        ...


def decode_params(decoding: DecodingSettings, **overrides: Any) -> DecodeParams:
    """The decoding settings as engine parameters; ``overrides`` replace single values."""
    names = {f.name for f in fields(DecodeParams)}
    params = DecodeParams(**{name: getattr(decoding, name) for name in names})
    return replace(params, **overrides) if overrides else params


def fault_rates(faults: FaultSettings, model: str) -> FaultRates:
    return FaultRates(raise_=getattr(faults, f"{model}_raise"), nan=getattr(faults, f"{model}_nan"),
                      hang=getattr(faults, f"{model}_hang"), hang_ms=getattr(faults, f"{model}_hang_ms"))


def guarded(runner: Runner, model: str, resilience: ResilienceSettings, faults: FaultSettings) -> GuardedRunner:
    """``runner`` behind its own circuit breaker, with the faults the settings inject (if any)."""
    rates = fault_rates(faults, model)
    if rates.any:
        runner = FaultyRunner(runner, random_faults(rates, faults.seed + (model == "draft")), rates.hang_ms)
    return GuardedRunner(runner, Breaker(model, resilience.fail_max, resilience.reset_timeout),
                         resilience.step_timeout or None)


def build_engine(pair: ModelPair, settings: Settings) -> tuple[Engine, Breakers]:
    """The engine over ``pair``, each model's passes behind a circuit breaker."""
    target = guarded(pair.target.runner, "target", settings.resilience, settings.faults)
    draft = (guarded(pair.draft.runner, "draft", settings.resilience, settings.faults)
             if pair.draft is not None else None)
    engine = Engine(
        target,
        pair.target.tokenizer,
        draft=draft,
        eos_ids=pair.target.eos_ids,
        max_context=pair.target.max_context,
        vocab_size=pair.target.vocab_size,
        draft_window=settings.models.draft_window,
    )
    return engine, Breakers(target.breaker, draft.breaker if draft is not None else None)


def load_pair_for(settings: Settings, progress: ProgressFn = no_progress) -> ModelPair:
    models = settings.models
    return load_pair(models.target, models.draft, precision=models.precision,
                     draft_precision=models.draft_precision, device=models.device, cache_dir=models.cache_dir,
                     progress=progress, draft_head_tokens=models.draft_head_tokens, kv_cache=models.kv_cache,
                     draft_kv_cache=models.draft_cache, lean_target=models.lean_target)


@dataclass
class Runtime:
    """A loaded model pair, its engine, the settings they were built from and the replies' listeners."""

    settings: Settings
    pair: ModelPair
    engine: Engine
    observers: Observers = field(default_factory=Observers)
    breakers: Breakers | None = None
    memory: MemoryBudget | None = None

    @classmethod
    def from_pair(cls, settings: Settings, pair: ModelPair, observers: Observers | None = None) -> Runtime:
        engine, breakers = build_engine(pair, settings)
        draft_positions = engine.draft.most_positions if engine.draft is not None else None
        return cls(settings, pair, engine, observers or Observers(), breakers,
                   MemoryBudget.for_pair(pair, settings.models.memory_budget_gb, draft_positions))

    @property
    def degraded(self) -> str | None:
        """Why replies are degraded now (a model's circuit is open), or None."""
        return self.breakers.why() if self.breakers is not None else None

    @property
    def memory_note(self) -> str | None:
        return self.memory.note if self.memory is not None else None

    @property
    def target_name(self) -> str:
        return self.pair.target.name

    @property
    def draft_name(self) -> str | None:
        return self.pair.draft.name if self.pair.draft is not None else None

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this pair can run (those needing a draft model only when one is loaded)."""
        return tuple(name for name, mode in MODES.items() if self.pair.draft is not None or not mode.needs_draft_model)

    @property
    def default_mode(self) -> str:
        drafter = self.settings.decoding.drafter
        return drafter if drafter in self.modes else TARGET

    def params(self, **overrides: Any) -> DecodeParams:
        return decode_params(self.settings.decoding, **overrides)

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """Token ids that ask the target for the next assistant message of ``messages``."""
        return render_prompt(self.pair.target.tokenizer, messages)

    def generate(self, prompt_ids: Sequence[int], params: DecodeParams, mode: str,
                 cancel: threading.Event | None = None, *, fresh: bool = False, operation: str = "chat",
                 messages: Sequence[Message] | None = None, conversation_id: str | None = None,
                 parent: object | None = None) -> Iterator[Event]:
        """One reply's events, through every listener; ``fresh`` first empties the KV caches."""
        if self.memory is not None:
            self.engine.keep_shared(prompt_ids)  # a shorter conversation's caches can give pages back now
            self.memory.before_reply(min(len(prompt_ids) + params.max_new_tokens, self.engine.max_context))
        if fresh:
            self.engine.reset()
        events = self.engine.generate(prompt_ids, params, mode, cancel)
        if not self.observers.listeners:
            return events
        info = ReplyInfo(prompt_ids, params, mode, self.target_name, self.draft_name, operation, conversation_id,
                         [dict(m) for m in messages] if messages is not None else None, parent)
        for listener in self.observers.listeners:
            events = listener(events, info)
        return events

    def reply(self, messages: Sequence[Message], params: DecodeParams, mode: str,
              cancel: threading.Event | None = None, fresh: bool = False,
              conversation_id: str | None = None) -> Iterator[Event]:
        return self.generate(self.prompt_ids(messages), params, mode, cancel, fresh=fresh, messages=messages,
                             conversation_id=conversation_id)


def load_runtime(settings: Settings, progress: ProgressFn = no_progress,
                 observers: Observers | None = None) -> Runtime:
    """The running system the settings describe; ``observers`` default to what the settings turn on."""
    observers = observers if observers is not None else observers_from_settings(settings)
    return Runtime.from_pair(settings, load_pair_for(settings, progress), observers)


def draft_settings(settings: Settings, draft: str, precision: str, head_tokens: int | None) -> Settings:
    """``settings`` with another draft model, precision and head."""
    models = settings.models.model_copy(
        update={"draft": draft, "draft_precision": precision, "draft_head_tokens": head_tokens})
    return settings.model_copy(update={"models": models})


def with_draft(runtime: Runtime, draft: str, precision: str, head_tokens: int | None,
               progress: ProgressFn = no_progress) -> Runtime:
    """``runtime``'s target (the same loaded model) with another draft: a point of a draft sweep."""
    settings = draft_settings(runtime.settings, draft, precision, head_tokens)
    loaded = load_draft(runtime.pair.target, draft, precision=precision, cache=ModelCache(settings.models.cache_dir),
                        progress=progress, head_tokens=head_tokens,
                        kv_cache=settings.models.draft_cache)
    return Runtime.from_pair(settings, ModelPair(runtime.pair.target, loaded), runtime.observers)


def reply_summary(summary: RunSummary, params: DecodeParams) -> dict[str, Any]:
    """What the history keeps of a reply: how it was decoded and what that cost."""
    return {
        "mode": summary.mode,
        "k": params.k,
        "tau": params.tau,
        "temperature": params.temperature,
        "new_tokens": summary.new_tokens,
        "tokens_per_s": round(summary.tokens_per_s, 3),
        "acceptance_rate": summary.acceptance_rate,
        "mean_accepted": round(summary.mean_accepted, 3),
        "ttft_s": round(summary.ttft_s, 4),
        "seconds": round(summary.seconds, 3),
        "finish_reason": summary.finish_reason,
        "degraded_tokens": summary.degraded_tokens,
        "target_failures": summary.target_failures,
        "draft_failures": summary.draft_failures,
        **({"failure": summary.failure} if summary.failure else {}),
    }
