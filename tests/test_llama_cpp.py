"""The bench's llama.cpp modes, run by the real llama.cpp (llama-cpp-python, the ``peers`` extra) on
tiny GGUF files the test writes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
from serving import serving_settings
from tiny import save_tiny_gguf

from specdec_tui.bench.harness import BenchPlan, BenchRow, run_suite
from specdec_tui.bench.llama_cpp import LlamaCppError, LlamaCppPeer
from specdec_tui.bench.suite import BenchPrompt
from specdec_tui.engine.decoder import DecodeParams
from specdec_tui.models.loader import load_pair
from specdec_tui.runtime import Runtime

PROMPTS = [
    BenchPrompt("add", "code", ({"role": "user", "content": "def add(a, b):"},)),
    BenchPrompt("fox", "prose", ({"role": "user", "content": "The quick brown fox jumps over the quick brown"},)),
]
NEW_TOKENS = 24


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[BenchRow]:
    folder = tmp_path_factory.mktemp("gguf")
    save_tiny_gguf(folder / "target.gguf")
    save_tiny_gguf(folder / "draft.gguf", seed=1)  # another model: most of its proposals are rejected
    pair = load_pair(str(folder / "target.gguf"), str(folder / "draft.gguf"), precision="fp32",
                     draft_precision="fp32", device="cpu", cache_dir=folder / "cache")
    runtime = Runtime.from_pair(serving_settings(), pair)
    runtime.engine.decoder.eos_ids = frozenset()
    pair.target.eos_ids = frozenset()  # every reply runs to NEW_TOKENS, in both engines
    plan = BenchPlan(modes=["target", "llama.cpp-target", "llama.cpp-draft", "llama.cpp-lookup"], ks=[3],
                     taus=[1.0], max_new_tokens=NEW_TOKENS)
    return run_suite(runtime, PROMPTS, plan)


def by_mode(rows: list[BenchRow], mode: str) -> dict[str, BenchRow]:
    return {row.prompt_id: row for row in rows if row.mode == mode}


def test_llama_cpp_decodes_the_same_prompt_ids_greedily_to_the_same_tokens_as_our_fp32_target(rows: list[BenchRow]):
    # The tiny GGUF holds fp32 weights, so llama.cpp and our engine compute the same model here.
    llama = by_mode(rows, "llama.cpp-target")
    assert set(llama) == {"add", "fox"}
    assert all(row.new_tokens == NEW_TOKENS and row.identical_to_target for row in llama.values()), llama
    assert all(row.tokens_per_s > 0 and row.speedup_vs_target > 0 for row in llama.values())


def test_llama_cpp_speculative_modes_keep_its_target_only_reply(rows: list[BenchRow]):
    for mode in ("llama.cpp-draft", "llama.cpp-lookup"):
        runs = by_mode(rows, mode)
        assert set(runs) == {"add", "fox"} and all(row.k == 3 for row in runs.values())
        assert all(row.new_tokens == NEW_TOKENS and row.identical_to_target for row in runs.values()), (mode, runs)


def test_a_model_that_is_not_a_gguf_file_is_a_one_line_error(tmp_path: Path):
    with pytest.raises(LlamaCppError, match="the llama.cpp modes run GGUF files; .* is not one"):
        LlamaCppPeer(str(tmp_path / "a-folder"), None)
    peer = LlamaCppPeer(str(tmp_path / "t.gguf"), None)
    with pytest.raises(LlamaCppError, match="llama.cpp-draft needs a draft model"):
        peer.run("llama.cpp-draft", [1, 2], DecodeParams(k=2, max_new_tokens=4), frozenset())
    with pytest.raises(LlamaCppError, match="measured greedily"):
        peer.run("llama.cpp-target", [1, 2], DecodeParams(temperature=0.7), frozenset())
