"""The memory budget: a mapped tensor's pages handed back, and a target that drops int8 blocks before a
reply could take the process past the budget, replying the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_indexed_int8 import needs_kernels, verify_then_steps
from tiny import save_tiny_gguf

from specdec_tui.bench.cli import main as bench_main
from specdec_tui.config import ModelSettings, Settings
from specdec_tui.engine.decoder import FinishedEvent
from specdec_tui.models import quantized_kernels
from specdec_tui.models.budget import REPLY_HEADROOM, TAKE_BACK_SLACK, MemoryBudget
from specdec_tui.models.fast_llama import FastLlama
from specdec_tui.models.kv_cache import KVCache
from specdec_tui.models.loader import ModelPair, load_pair
from specdec_tui.models.memory import file_mapped, release_pages, resident_bytes
from specdec_tui.runtime import Runtime

needs_indices = pytest.mark.skipif(not quantized_kernels.available() or not quantized_kernels.reads_indices(),
                                   reason="dropping int8 blocks needs the indices' kernel (AVX-512 VNNI)")
MB = 1 << 20


def test_a_file_mapped_tensor_hands_its_pages_back_and_still_reads_the_same_values(tmp_path: Path):
    save_file({"weights": torch.arange(32 * MB, dtype=torch.int32).view(-1, 1024)}, tmp_path / "w.safetensors")
    weights = load_file(tmp_path / "w.safetensors")["weights"]  # 128 MB of a mapped file
    assert file_mapped(weights)
    expected = int(weights.sum())  # reads every page in
    before = resident_bytes()
    released = release_pages(weights)
    after = resident_bytes()
    assert before is not None and after is not None
    assert released >= 128 * MB - 8192
    assert before - after >= 120 * MB
    assert int(weights.sum()) == expected  # paged in again from the file


def test_a_tensor_of_the_allocators_memory_is_never_released():
    values = torch.arange(4 * MB, dtype=torch.int32)
    assert not file_mapped(values)
    assert release_pages(values) == 0
    assert torch.equal(values, torch.arange(4 * MB, dtype=torch.int32))  # not zeroed


def test_a_cache_counts_the_positions_written_across_resets_and_growth():
    cache = KVCache(layers=2, kv_heads=2, head_dim=4, capacity=8)
    assert cache.position_bytes == 2 * 2 * 2 * 4 * 4
    assert cache.written == 0
    assert cache.grown(16, 5).written == 5


def q4k_pair(tmp_path: Path, start: str = "later") -> ModelPair:
    """A tiny pair whose target holds Q4_K linears both ways: packed at this "first" start (into a cache
    of its own), or mapped from the cache entry a first start stored (a "later" one)."""
    if not (tmp_path / "tiny.gguf").exists():
        save_tiny_gguf(tmp_path / "tiny.gguf", q4k_linears=True)
    cache = tmp_path / ("cache" if start == "later" else f"cache-{len(list(tmp_path.glob('cache*')))}")

    def load() -> ModelPair:
        return load_pair(str(tmp_path / "tiny.gguf"), str(tmp_path / "tiny.gguf"), precision="int8",
                         draft_precision="int4", device="cpu", cache_dir=cache)

    first = load()
    return first if start == "first" else load()


@needs_indices
def test_a_target_drops_the_blocks_of_as_many_linears_from_the_last_layer_back_as_asked_and_keeps_its_numbers(
        tmp_path: Path):
    target = q4k_pair(tmp_path).target.runner
    assert isinstance(target, FastLlama)
    before = verify_then_steps(target)
    held = target.int8_block_bytes
    last = target.layers[-1]
    one = last.down.packed.numel()  # the last layer's last linear goes first
    assert target.drop_int8_blocks(at_least=one) == 1
    assert last.down.packed.numel() == 0 and last.gate_up.packed.numel() > 0
    assert target.int8_block_bytes == held - one
    assert target.drop_int8_blocks(at_least=last.gate_up.packed.numel() + 1) == 2  # gate_up, then out_proj
    assert last.out_proj.packed.numel() == 0 and last.qkv.packed.numel() > 0
    after = verify_then_steps(target)
    assert torch.equal(after[0], after[1])  # a verify block is still its single steps
    assert torch.equal(after[0], before[0])
    assert target.drop_int8_blocks() > 0 and target.int8_block_bytes == 0
    assert torch.equal(verify_then_steps(target)[0], before[0])


@needs_indices
def test_a_target_takes_back_the_blocks_a_mapped_file_holds_latest_dropped_first_and_keeps_its_numbers(
        tmp_path: Path):
    target = q4k_pair(tmp_path).target.runner
    assert isinstance(target, FastLlama)
    before = verify_then_steps(target)
    held = target.int8_block_bytes
    last = target.layers[-1]
    assert target.drop_int8_blocks(at_least=last.down.packed.numel() + 1) == 2  # down, then gate_up
    down, gate_up = last.down.released_blocks, last.gate_up.released_blocks
    assert down is not None and gate_up is not None
    assert target.released_int8_block_bytes == held - target.int8_block_bytes
    # gate_up was dropped after down, so it comes back first, and only what fits
    assert target.take_int8_blocks_back(at_most=gate_up.numel() + down.numel() - 1) == 1
    assert last.gate_up.packed is gate_up and last.down.packed.numel() == 0
    assert target.released_int8_block_bytes == down.numel()
    assert target.take_int8_blocks_back(at_most=held) == 1
    assert target.int8_block_bytes == held and target.released_int8_block_bytes == 0
    assert target.take_int8_blocks_back(at_most=held) == 0
    after = verify_then_steps(target)
    assert torch.equal(after[0], after[1]) and torch.equal(after[0], before[0])
    packed_here = q4k_pair(tmp_path, "first").target.runner
    assert isinstance(packed_here, FastLlama)
    packed_here.drop_int8_blocks()  # the allocator's memory: freed, nothing left to take back
    assert packed_here.released_int8_block_bytes == 0 and packed_here.take_int8_blocks_back(at_most=held) == 0


def test_a_cache_hands_back_the_pages_past_a_position_and_keeps_the_positions_before():
    cache = KVCache(layers=3, kv_heads=2, head_dim=64, capacity=4096)  # a position: 512 bytes a layer
    for tensors in (cache.keys, cache.values):
        for i, layer in enumerate(tensors):
            layer.copy_(torch.arange(layer.numel(), dtype=torch.float32).view_as(layer) + i)
    cache.written = 4096
    kept = [layer[:, :100].clone() for layer in cache.keys + cache.values]
    before = resident_bytes()
    released = cache.release_past(100)
    after = resident_bytes()
    assert before is not None and after is not None
    # 12 planes (layer, keys or values, head) of 256 pages each; each keeps the 7 pages reaching its position 99
    assert released == 12 * (256 - 7) * 4096
    assert before - after >= released - 64 * 4096
    assert cache.written == 100 and cache.release_past(100) == 0 and cache.release_past(4000) == 0
    for old, layer in zip(kept, cache.keys + cache.values, strict=True):
        assert torch.equal(layer[:, :100], old)
        assert float(layer[:, 4095].abs().sum()) == 0.0  # handed back: zeros until written again


def long_conversation_then_new_chat(*models: FastLlama) -> None:
    """Each model's cache writes 1,000 positions, then is emptied: what a new chat leaves behind."""
    for model in models:
        model.forward([3 + i % 300 for i in range(1000)], 1)
        model.reset()


class Resident:
    """A process whose resident memory the test sets."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@needs_indices
def test_a_budget_drops_only_what_keeps_the_next_reply_under_it_counting_unread_blocks_and_the_caches_growth(
        tmp_path: Path):
    pair = q4k_pair(tmp_path)
    target, draft = pair.target.runner, pair.draft.runner
    assert isinstance(target, FastLlama) and isinstance(draft, FastLlama)
    held = target.int8_block_bytes
    per_position = target.cache.position_bytes + draft.cache.position_bytes
    resident = Resident(1000 * MB)
    budget = MemoryBudget.for_pair(pair, 1.0)
    assert budget is not None and not budget.blocks_read  # mapped from the packed entry, not read yet
    just_packed = MemoryBudget.for_pair(q4k_pair(tmp_path, "first"), 1.0)
    assert just_packed is not None and just_packed.blocks_read  # in this process's memory from the start
    budget.resident = resident
    assert target.cache.written == draft.cache.written == 1  # the load's one warm-up pass
    assert budget.growth(100) == 99 * per_position
    # room for the unread blocks, 99 positions and a reply's headroom
    budget.limit = resident.now + held + 99 * per_position + REPLY_HEADROOM

    assert budget.projected(100) == budget.limit  # the unread blocks counted
    assert budget.before_reply(100) is None and budget.note is None
    assert budget.projected(100) == budget.limit - held  # a reply has read them: resident from now on
    assert target.int8_block_bytes == held
    # after a reply the blocks count as resident: 99 positions' room is now all the room there is
    resident.now += held
    assert budget.before_reply(100) is None
    resident.now += 1
    last_down = target.layers[-1].down.packed.numel()
    note = budget.before_reply(100)
    assert note is not None and note == budget.note
    assert "1 more of the target's linears read only their 4-bit indices" in note
    assert target.int8_block_bytes == held - last_down
    resident.now -= last_down  # what handing the pages back does to a real process
    # positions already written take no more memory: 50 written, 50 to come
    target.forward(list(range(50)), 1)
    draft.forward(list(range(50)), 1)
    target.reset()
    draft.reset()
    resident.now += 49 * per_position
    assert budget.growth(100) == 50 * per_position
    assert budget.before_reply(100) is None
    assert target.int8_block_bytes == held - last_down
    # past every block there is nothing left to drop, and no note
    resident.now += 10 * held
    assert budget.before_reply(100) is not None and target.int8_block_bytes == 0
    assert budget.before_reply(100) is None


def test_a_budget_counts_only_the_positions_a_draft_reading_a_window_holds(tmp_path: Path):
    pair = q4k_pair(tmp_path)
    target, draft = pair.target.runner, pair.draft.runner
    assert isinstance(target, FastLlama) and isinstance(draft, FastLlama)
    budget = MemoryBudget.for_pair(pair, 1.0, draft_positions=lambda context: min(context, 50))
    assert budget is not None
    assert budget.growth(100) == 99 * target.cache.position_bytes + 49 * draft.cache.position_bytes
    runtime = Runtime.from_pair(Settings(models=ModelSettings(draft_window=2048)), pair)
    assert runtime.memory is not None and runtime.memory.draft_positions is not None
    assert runtime.memory.draft_positions(100) == 100
    assert runtime.memory.draft_positions(100_000) == 32 + 2048 + 1024 + 32


@needs_indices
def test_a_budget_takes_back_what_fits_once_a_shorter_conversation_hands_the_caches_pages_back(tmp_path: Path):
    pair = q4k_pair(tmp_path)
    target, draft = pair.target.runner, pair.draft.runner
    assert isinstance(target, FastLlama) and isinstance(draft, FastLlama)
    held = target.int8_block_bytes
    budget = MemoryBudget.for_pair(pair, 1.0)
    assert budget is not None
    budget.resident = Resident(budget.limit)
    assert budget.before_reply(100) is not None and target.int8_block_bytes == 0  # every block let go
    budget.resident.now = 0
    assert budget.before_reply(100) is None  # room, but the caches gave nothing back: nothing comes back
    assert target.int8_block_bytes == 0
    long_conversation_then_new_chat(target, draft)
    first, second = target.layers[0].qkv, target.layers[0].out_proj  # the first two linears
    assert first.released_blocks is not None and second.released_blocks is not None
    room = first.released_blocks.numel() + second.released_blocks.numel() - 1  # the first fits, not the second
    budget.resident.now = budget.limit - TAKE_BACK_SLACK - REPLY_HEADROOM - room
    note = budget.before_reply(100)
    assert note is not None and "1 of the target's linears read their int8 blocks again" in note
    assert first.packed.numel() > 0 and second.packed.numel() == 0
    assert target.int8_block_bytes == first.packed.numel() and target.released_int8_block_bytes == held - first.packed.numel()
    assert target.cache.written == draft.cache.written == 100  # the pages past the new chat's reply went back
    budget.resident.now = 0
    assert budget.before_reply(100) is None  # the caches had nothing more to give back


@needs_indices
def test_a_lean_target_never_takes_its_blocks_back_and_its_budget_drops_none(tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf", q4k_linears=True)
    for _ in range(2):  # the second load maps the packed entry the first one stored
        pair = load_pair(str(tmp_path / "tiny.gguf"), str(tmp_path / "tiny.gguf"), precision="int8",
                         draft_precision="int4", device="cpu", cache_dir=tmp_path / "cache", lean_target=True)
    target, draft = pair.target.runner, pair.draft.runner
    assert isinstance(target, FastLlama) and isinstance(draft, FastLlama)
    assert target.int8_block_bytes == 0 and target.released_int8_block_bytes > 0  # dropped at the load
    budget = MemoryBudget.for_pair(pair, 1.0)
    assert budget is not None and not budget.drops_blocks
    budget.resident = Resident(0)
    long_conversation_then_new_chat(target, draft)  # with all the room there is
    assert budget.before_reply(100) is None
    assert target.int8_block_bytes == 0 and draft.cache.written == 100


@needs_kernels
def test_no_budget_where_it_could_do_nothing_and_one_that_only_narrows_the_draft_where_blocks_must_stay(
        tmp_path: Path):
    pair = q4k_pair(tmp_path)
    assert MemoryBudget.for_pair(pair, 0) is None
    save_tiny_gguf(tmp_path / "plain.gguf")  # float linears: int8 blocks only, no indices to fall back on
    plain = load_pair(str(tmp_path / "plain.gguf"), None, precision="int8", draft_precision="int4", device="cpu",
                      cache_dir=tmp_path / "cache")
    assert MemoryBudget.for_pair(plain, 3.0) is None  # no blocks it may drop, and no draft
    with quantized_kernels.using_instruction_set("avx2"):  # the blocks are all this processor reads
        budget = MemoryBudget.for_pair(pair, 3.0)
        assert budget is not None and not budget.drops_blocks and budget.draft is pair.draft.runner
        assert budget.blocks_read  # every pass reads them, the load's warm-up pass too
        pair.draft.runner.keep_kv_in(torch.float16)
        assert MemoryBudget.for_pair(pair, 3.0) is None  # and the draft's cache is float16 already
    if quantized_kernels.reads_indices():
        budget = MemoryBudget.for_pair(pair, 3.0)
        assert budget is not None and budget.drops_blocks and budget.draft is not None


@needs_kernels
@pytest.mark.parametrize("instruction_set", ["avx2", "avx512_vnni"])
def test_past_the_blocks_a_budget_narrows_the_drafts_cache_to_float16_keeping_what_it_holds(
        tmp_path: Path, instruction_set: str):
    if instruction_set not in quantized_kernels.instruction_sets():
        pytest.skip(f"this processor cannot run the kernels' {instruction_set} products")
    with quantized_kernels.using_instruction_set(instruction_set):
        pair = q4k_pair(tmp_path)
        runtime = Runtime.from_pair(Settings(), pair)
        target, draft, budget = pair.target.runner, pair.draft.runner, runtime.memory
        assert isinstance(target, FastLlama) and isinstance(draft, FastLlama) and budget is not None
        params = runtime.params(max_new_tokens=16)
        prompt = [3 + i % 300 for i in range(40)]
        kept = finished(runtime.generate(prompt, params, "hybrid", fresh=True))
        held, length = target.int8_block_bytes, draft.length
        before = draft.cache.keys[0][:, :length].clone()
        budget.resident = Resident(budget.limit + 10 * held)  # far past: more than every block
        note = budget.before_reply(len(prompt) + 16)
        assert note is not None and "the draft keeps its keys and values in float16 from now on" in note
        assert draft.cache.dtype == torch.float16 and draft.length == length
        assert torch.equal(draft.cache.keys[0][:, :length], before.half())  # what it held, rounded to nearest
        assert target.int8_block_bytes == (0 if budget.drops_blocks else held)
        assert budget.before_reply(len(prompt) + 16) is None  # nothing left to do
        narrowed = finished(runtime.generate(prompt, params, "hybrid"))
        assert narrowed.token_ids == kept.token_ids  # the draft only proposes


def finished(events: object) -> FinishedEvent:
    *_, last = events  # type: ignore[misc]
    assert isinstance(last, FinishedEvent)
    return last


@needs_indices
def test_a_runtime_checks_its_budget_before_each_reply_and_replies_the_same_after_dropping_blocks(tmp_path: Path):
    pair = q4k_pair(tmp_path)
    runtime = Runtime.from_pair(Settings(), pair)
    assert runtime.memory is not None and runtime.memory.limit == 3 * 10**9
    params = runtime.params(max_new_tokens=24)
    prompt = list(range(3, 40))
    kept = finished(runtime.generate(prompt, params, "hybrid", fresh=True))
    assert runtime.memory.note is None  # a tiny pair is far under 3 GB
    held = pair.target.runner.int8_block_bytes
    # a byte over the budget with the reply's growth and headroom: the next reply must make room
    growth = runtime.memory.growth(len(prompt) + 24)
    runtime.memory.resident = Resident(runtime.memory.limit - REPLY_HEADROOM - growth + 1)
    dropped = finished(runtime.generate(prompt, params, "hybrid", fresh=True))
    assert runtime.memory.note is not None
    assert 0 < pair.target.runner.int8_block_bytes < held
    assert dropped.token_ids == kept.token_ids
    assert dropped.token_ids == finished(runtime.generate(prompt, params, "target", fresh=True)).token_ids


@needs_indices
def test_a_runtime_takes_the_blocks_back_before_a_new_chats_first_reply_and_replies_the_same(tmp_path: Path):
    pair = q4k_pair(tmp_path)
    runtime = Runtime.from_pair(Settings(), pair)
    assert runtime.memory is not None
    params = runtime.params(max_new_tokens=8)
    new_chat = list(range(5, 15))
    kept = finished(runtime.generate(new_chat, params, "hybrid", fresh=True))
    held = pair.target.runner.int8_block_bytes
    runtime.memory.resident = Resident(runtime.memory.limit)  # at the budget: the long chat's reply drops them all
    finished(runtime.generate([3 + i % 300 for i in range(200)], params, "hybrid"))
    assert pair.target.runner.int8_block_bytes == 0
    runtime.memory.resident.now = 0
    again = finished(runtime.generate(new_chat, params, "hybrid"))  # not fresh: as the chat sends a new chat
    assert pair.target.runner.int8_block_bytes == held
    assert runtime.memory.note is not None and "read their int8 blocks again" in runtime.memory.note
    assert again.token_ids == kept.token_ids


def test_the_bench_turns_the_budget_off_unless_given(capsys: pytest.CaptureFixture[str]):
    assert bench_main(["--show-settings"]) == 0
    assert "models.memory_budget_gb = 0.0" in capsys.readouterr().out
    assert bench_main(["--show-settings", "--memory-budget-gb", "2.5"]) == 0
    assert "models.memory_budget_gb = 2.5" in capsys.readouterr().out


def budget_runtime(tmp_path: Path, settings: Settings) -> Runtime:
    """A runtime over the tiny Q4_K pair whose process stands at its budget: its first reply drops blocks."""
    runtime = Runtime.from_pair(settings, q4k_pair(tmp_path))
    assert runtime.memory is not None
    runtime.memory.resident = Resident(runtime.memory.limit)
    return runtime


@needs_indices
async def test_the_chat_says_once_what_the_budget_dropped(tmp_path: Path):
    from test_tui import send, settings, until

    from specdec_tui.chat.history import History
    from specdec_tui.tui.app import SpecDecApp

    runtime = budget_runtime(tmp_path, settings())
    app = SpecDecApp(runtime.settings, load=lambda s, p: runtime, history=History(":memory:"))
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.source is not None)
        await send(pilot, "def add(a, b):")
        notes = [n.message for n in app._notifications if n.message.startswith("memory:")]
        assert notes == [runtime.memory_note]
        assert runtime.pair.target.runner.int8_block_bytes == 0  # a tiny target's blocks all go at once
        await send(pilot, "and subtract?")  # nothing more to drop: no new note, and the old one not again
        assert [n.message for n in app._notifications if n.message.startswith("memory:")] == notes


@needs_indices
def test_the_servers_health_shows_what_the_budget_dropped(tmp_path: Path):
    from types import SimpleNamespace

    from specdec_tui.server.app import health_report

    runtime = budget_runtime(tmp_path, Settings())
    state = SimpleNamespace(runtime=runtime, settings=runtime.settings, running=0, waiting=0, load_error=None)
    assert "memory" not in health_report(state)[0]  # type: ignore[arg-type]
    finished(runtime.generate(list(range(3, 40)), runtime.params(max_new_tokens=8), "target"))
    body, status = health_report(state)  # type: ignore[arg-type]
    assert status == 200 and body["memory"] == runtime.memory_note and body["memory"].startswith("memory: ")
