"""Circuit breakers, fault injection and the degraded mode, on the tiny models.

Faults are injected after the real pass has run (the model's cache already holds its keys and
values), so every test here also checks that a failed pass is rolled back.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable

import pytest
import torch
from tiny import perturbed, runner_for, tiny_model, tiny_pair, tiny_tokenizer

from specdec_tui.config import FaultSettings, ResilienceSettings, load_settings
from specdec_tui.engine.cached_model import CachedModel
from specdec_tui.engine.decoder import DecodeParams, FinishedEvent, Origin, StepEvent
from specdec_tui.engine.faults import Fault, FaultRates, FaultyRunner, InjectedFault, random_faults
from specdec_tui.engine.resilience import Breaker, GuardedRunner, ModelFailure, bad_logits
from specdec_tui.engine.session import Engine
from specdec_tui.runtime import Runtime

PROMPT = tiny_tokenizer().encode("def add(a, b):\n    return a + b\n\ndef add(a, b):")
GREEDY = DecodeParams(k=4, adaptive_k=False, max_new_tokens=48)
NEVER: Callable[[], Fault | None] = lambda: None


def on_passes(fault: Fault, passes: Iterable[int]) -> Callable[[], Fault | None]:
    """A fault on exactly the given passes (0-based, counting every pass the model runs)."""
    chosen, counter = set(passes), itertools.count()
    return lambda: fault if next(counter) in chosen else None


def faulty_engine(target_faults: Callable[[], Fault | None] = NEVER, draft_faults: Callable[[], Fault | None] = NEVER,
                  *, fail_max: int = 1000, reset_timeout: float = 60.0, step_timeout: float | None = None,
                  with_draft: bool = True, hang_ms: float = 0.0) -> tuple[Engine, Breaker, Breaker]:
    """The tiny pair, each model behind a breaker, each pass failing as its ``*_faults`` decides."""
    target_model = tiny_model("qwen2")
    target_breaker, draft_breaker = Breaker("target", fail_max, reset_timeout), Breaker("draft", fail_max,
                                                                                           reset_timeout)
    target = GuardedRunner(FaultyRunner(runner_for(target_model, "fp32"), target_faults, hang_ms), target_breaker,
                           step_timeout)
    draft = GuardedRunner(FaultyRunner(runner_for(perturbed(target_model, 0.05), "fp32", exact=False), draft_faults,
                                       hang_ms), draft_breaker, step_timeout)
    engine = Engine(target, tiny_tokenizer(), draft=draft if with_draft else None, eos_ids=frozenset(),
                    max_context=256, vocab_size=target_model.config.vocab_size)
    return engine, target_breaker, draft_breaker


def reply(engine: Engine, mode: str, params: DecodeParams = GREEDY) -> tuple[list[StepEvent], FinishedEvent]:
    events = list(engine.generate(PROMPT, params, mode))
    finished = events[-1]
    assert isinstance(finished, FinishedEvent)
    return [e for e in events if isinstance(e, StepEvent)], finished


def origins(steps: list[StepEvent]) -> list[Origin]:
    return [token.origin for step in steps for token in step.tokens]


@pytest.fixture(scope="module")
def target_only() -> tuple[int, ...]:
    engine, _, _ = faulty_engine()
    return reply(engine, "target")[1].token_ids


@pytest.mark.parametrize("mode", ["target", "model", "prompt-lookup", "hybrid"])
def test_retried_exceptions_leave_the_greedy_reply_identical_to_target_only(mode: str,
                                                                            target_only: tuple[int, ...]):
    engine, target, _ = faulty_engine(random_faults(FaultRates(raise_=0.3), seed=1),
                                          random_faults(FaultRates(raise_=0.3), seed=2))
    steps, finished = reply(engine, mode)
    assert finished.token_ids == target_only
    assert finished.summary.target_failures > 0
    assert finished.summary.degraded_tokens == 0 and Origin.DEGRADED not in origins(steps)
    assert target.state == "closed" and target.log.failures == finished.summary.target_failures
    if mode in ("model", "hybrid"):
        assert finished.summary.draft_failures > 0
        assert any(step.record.draft_failed for step in steps)


def test_a_failed_pass_leaves_the_cache_exactly_as_it_was():
    model = tiny_model("qwen2")
    failing = CachedModel(FaultyRunner(runner_for(model, "fp32"), on_passes(Fault.RAISE, [1])))
    fresh = CachedModel(runner_for(model, "fp32"))
    failing.prefill(PROMPT[:10])
    fresh.prefill(PROMPT[:10])
    with pytest.raises(InjectedFault):
        failing.logits_for(PROMPT[:16], 3)  # the pass ran, wrote six positions, then failed
    assert failing.ids == PROMPT[:10]
    assert torch.equal(failing.logits_for(PROMPT[:16], 3), fresh.logits_for(PROMPT[:16], 3))


def test_a_burst_of_target_failures_opens_the_circuit_degrades_then_closes_on_a_good_trial():
    # Passes 2 and 3 fail: with fail_max 2 the circuit opens; the draft model writes on alone (each
    # draft pass slowed a little so the reset timeout passes within the reply: about 30 degraded
    # tokens), then a trial pass closes it.
    engine, target, _ = faulty_engine(on_passes(Fault.RAISE, [2, 3]), lambda: Fault.HANG, fail_max=2,
                                      reset_timeout=0.5, hang_ms=15)
    steps, finished = reply(engine, "model", DecodeParams(k=4, adaptive_k=False, max_new_tokens=80))
    assert target.log.transitions == [("closed", "open"), ("open", "half-open"), ("half-open", "closed")]
    assert target.log.trips == 1 and target.state == "closed"
    kinds = origins(steps)
    first, last = kinds.index(Origin.DEGRADED), len(kinds) - kinds[::-1].index(Origin.DEGRADED)
    assert set(kinds[first:last]) == {Origin.DEGRADED}  # one degraded stretch, while the circuit was open
    assert Origin.DEGRADED not in kinds[last:] and Origin.DRAFT in kinds[last:]  # verified again after
    assert finished.summary.degraded_tokens == last - first
    assert finished.summary.target_failures == 2
    assert "target model failed 2 passes in a row" in (finished.summary.failure or "")


def test_nan_logits_never_reach_the_output(target_only: tuple[int, ...]):
    engine, target, _ = faulty_engine(random_faults(FaultRates(nan=0.4), seed=3),
                                      random_faults(FaultRates(nan=0.4), seed=4))
    _, finished = reply(engine, "hybrid")
    assert finished.token_ids == target_only
    assert engine.target.runner.runner.injected[Fault.NAN] > 0
    assert "NaN logits" in target.log.last_failure


def test_a_target_that_only_returns_nan_leaves_a_reply_written_by_the_draft_alone():
    engine, target, _ = faulty_engine(lambda: Fault.NAN, fail_max=2)
    steps, finished = reply(engine, "model")
    assert set(origins(steps)) == {Origin.DEGRADED}
    assert finished.summary.degraded_tokens == finished.summary.new_tokens == GREEDY.max_new_tokens
    assert finished.summary.acceptance_rate is None and target.is_open


def test_a_hung_target_pass_counts_as_failed_and_is_retried(target_only: tuple[int, ...]):
    engine, target, _ = faulty_engine(on_passes(Fault.HANG, [3]), step_timeout=0.5, hang_ms=1500)
    _, finished = reply(engine, "target")
    assert finished.token_ids == target_only
    assert finished.summary.target_failures == 1
    assert "over the 0.5 s step timeout" in target.log.last_failure


def test_an_open_circuit_without_a_draft_model_ends_the_reply_and_keeps_what_was_written(
        target_only: tuple[int, ...]):
    engine, _, _ = faulty_engine(on_passes(Fault.RAISE, range(6, 100)), fail_max=2, with_draft=False)
    steps, finished = reply(engine, "prompt-lookup")
    assert finished.summary.finish_reason == "failed"
    assert "circuit" not in finished.text and "failed 2 passes in a row" in (finished.summary.failure or "")
    assert 0 < len(finished.token_ids) < len(target_only)
    assert finished.token_ids == target_only[: len(finished.token_ids)]
    assert Origin.DEGRADED not in origins(steps)


def test_a_failing_draft_model_falls_back_to_target_only_steps(target_only: tuple[int, ...]):
    engine, _, draft = faulty_engine(draft_faults=lambda: Fault.RAISE, fail_max=2)
    steps, finished = reply(engine, "model")
    assert finished.token_ids == target_only
    assert draft.is_open and draft.log.trips == 1
    assert finished.summary.draft_failures == 2  # then its circuit refuses it without running it
    assert all(step.record.drafted == 0 for step in steps)
    # The first step is the prompt's pass, which drafts nothing; the last had room for no draft.
    assert steps[0].record.prompt and all(step.record.draft_failed for step in steps[1:-1])
    assert set(origins(steps)) == {Origin.TARGET}


def test_bad_logits_are_nan_or_infinite_but_masked_ids_are_fine():
    logits = torch.zeros(2, 5)
    assert bad_logits(logits) is None
    logits[0, 1:] = float("-inf")  # a trimmed draft head
    assert bad_logits(logits) is None
    assert bad_logits(torch.full((1, 5), float("-inf"))) == "a row of logits with no finite value"
    logits[1, 2] = float("nan")
    assert bad_logits(logits) == "NaN logits"
    assert bad_logits(torch.tensor([[0.0, float("inf")]])) == "infinite logits"
    # in any row of a verify block, beside finite rows and masked ids
    block = torch.zeros(3, 5)
    block[0, 1:] = float("-inf")
    block[2, 4] = float("inf")
    assert bad_logits(block) == "infinite logits"
    block[2, 4], block[1, 0] = 0.0, float("nan")
    assert bad_logits(block) == "NaN logits"
    block[1, 0], block[2] = 0.0, float("-inf")
    assert bad_logits(block) == "a row of logits with no finite value"


def test_a_breaker_never_holds_its_lock_between_passes():
    engine, target, _ = faulty_engine()
    events = engine.generate(PROMPT, GREEDY, "model")
    next(events)  # mid-reply: a caller on another thread must not wait for the reply to end
    got: list[bool] = []

    def other_caller() -> None:  # the lock is reentrant, so only another thread can tell whether it is held
        got.append(target.circuit._lock.acquire(blocking=False))
        if got[0]:
            target.circuit._lock.release()

    caller = threading.Thread(target=other_caller)
    caller.start()
    caller.join()
    assert got == [True]
    events.close()


def test_injected_faults_follow_their_seed_and_rates():
    first = random_faults(FaultRates(raise_=0.2, nan=0.1, hang=0.1), seed=7)
    second = random_faults(FaultRates(raise_=0.2, nan=0.1, hang=0.1), seed=7)
    draws = [first() for _ in range(4000)]
    assert draws == [second() for _ in range(4000)]
    for fault, rate in ((Fault.RAISE, 0.2), (Fault.NAN, 0.1), (Fault.HANG, 0.1)):
        assert abs(draws.count(fault) / 4000 - rate) < 0.03


def test_faults_from_the_settings_are_injected_into_the_runtime_and_leave_no_trace():
    settings = load_settings()[0]
    clean = Runtime.from_pair(settings, tiny_pair())
    faulty = Runtime.from_pair(settings.model_copy(update={
        "faults": FaultSettings(target_raise=0.3, draft_nan=0.3, seed=5),
        "resilience": ResilienceSettings(fail_max=100),
    }), tiny_pair())
    messages = [{"role": "user", "content": "def add(a, b):"}]
    params = DecodeParams(max_new_tokens=24)
    expected = list(clean.reply(messages, params, "hybrid"))[-1]
    got = list(faulty.reply(messages, params, "hybrid"))[-1]
    assert isinstance(got, FinishedEvent) and isinstance(expected, FinishedEvent)
    assert got.token_ids == expected.token_ids
    assert got.summary.target_failures > 0 and got.summary.draft_failures > 0
    assert faulty.degraded is None and clean.breakers is not None and clean.breakers.target.state == "closed"


def test_a_guarded_pass_reports_any_error_as_a_model_failure():
    class Broken:
        input_vocab = 10

        def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
            raise RuntimeError("CUDA error: out of memory")

        def crop(self, length: int) -> None: ...

        def reset(self) -> None: ...

    with pytest.raises(ModelFailure, match="the target model failed: RuntimeError: CUDA error: out of memory"):
        GuardedRunner(Broken(), Breaker("target", 3, 1.0), None).forward([1], 1)


def test_a_bench_run_over_a_failing_draft_counts_its_failed_passes_and_stays_identical():
    from specdec_tui.bench.harness import BenchPlan, run_suite
    from specdec_tui.bench.suite import BenchPrompt

    settings = load_settings()[0].model_copy(update={"faults": FaultSettings(draft_raise=0.5, seed=2),
                                                     "resilience": ResilienceSettings(fail_max=100)})
    runtime = Runtime.from_pair(settings, tiny_pair())
    prompts = [BenchPrompt("add", "code", ({"role": "user", "content": "def add(a, b):"},))]
    rows = run_suite(runtime, prompts, BenchPlan(modes=["target", "speculative"], ks=[3], taus=[1.0],
                                                 max_new_tokens=16))
    speculative = next(row for row in rows if row.mode == "speculative")
    assert speculative.failed_passes > 0 and speculative.degraded_tokens == 0
    assert speculative.identical_to_target
