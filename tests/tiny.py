"""Tiny random models and a tiny tokenizer, built in a second, for tests that must not need the real pair."""

from __future__ import annotations

import copy
import json
import time
from functools import cache
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from specdec_tui.engine.cached_model import Runner, WrappedRunner
from specdec_tui.engine.session import Engine
from specdec_tui.models.hf_runner import HFRunner
from specdec_tui.models.loader import (
    LoadedModel,
    ModelPair,
    context_length,
    eos_token_ids,
    make_runner,
    prepare_model,
)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i)\n",
    "The quick brown fox jumps over the lazy dog.",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "Speculative decoding drafts tokens and verifies them in one pass. ünïcödé ✓ 漢字",
] * 20
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ARCHS = ("qwen2", "llama", "gpt2")


@cache
def tiny_tokenizer(vocab_size: int = 320) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    backend.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_model(arch: str, seed: int = 0, vocab_size: int | None = None, layers: int = 2,
               hidden: int = 64) -> PreTrainedModel:
    """A random causal LM of ``arch`` whose vocabulary matches ``tiny_tokenizer``, ``hidden`` wide (its
    MLP twice that)."""
    tokenizer = tiny_tokenizer()
    vocab = vocab_size or len(tokenizer)
    torch.manual_seed(seed)
    common = {"vocab_size": vocab, "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    if arch == "qwen2":
        config = Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                             initializer_range=0.3, **common)
        model = Qwen2ForCausalLM(config)
    elif arch == "llama":
        config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                             num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                             initializer_range=0.3, **common)
        model = LlamaForCausalLM(config)
    elif arch == "gpt2":
        config = GPT2Config(n_embd=64, n_layer=layers, n_head=4, n_positions=256, initializer_range=0.3,
                            bos_token_id=tokenizer.eos_token_id, **common)
        model = GPT2LMHeadModel(config)
    else:
        raise ValueError(arch)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model.eval()


def perturbed(model: PreTrainedModel, scale: float, seed: int = 1) -> PreTrainedModel:
    """A copy of ``model`` with Gaussian noise on every weight: a draft that mostly agrees."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * scale * param.std().clamp(min=1e-3))
    return draft


def tiny_engine(
    arch: str = "qwen2",
    precision: str = "fp32",
    noise: float = 0.05,
    seed: int = 0,
    eos_ids: frozenset[int] | None = None,
    fast: bool = True,
    draft_precision: str | None = None,
) -> Engine:
    """Target and a noisy copy as draft; ``eos_ids`` = frozenset() never stops early.

    ``fast`` picks the runner as the app does (the lean forward where supported); False forces
    transformers' own forward.
    """
    target = tiny_model(arch, seed)
    draft = perturbed(target, noise, seed + 1)
    tokenizer = tiny_tokenizer()
    return Engine(
        runner_for(target, precision, fast),
        tokenizer,
        draft=runner_for(draft, draft_precision or precision, fast, exact=False),
        eos_ids=eos_token_ids(target.generation_config, tokenizer) if eos_ids is None else eos_ids,
        max_context=context_length(target.config),
        vocab_size=target.config.vocab_size,
    )


def runner_for(model: PreTrainedModel, precision: str, fast: bool = True, exact: bool = True) -> Runner:
    if fast:
        return make_runner(model, precision, torch.device("cpu"), exact)
    return HFRunner(prepare_model(model, precision, torch.device("cpu"), exact))


def save_tiny(folder: Path, arch: str = "qwen2", seed: int = 0, tokenizer: PreTrainedTokenizerFast | None = None) -> Path:
    """Write a tiny model and tokenizer as a transformers folder."""
    tiny_model(arch, seed).save_pretrained(folder)
    (tokenizer or tiny_tokenizer()).save_pretrained(folder)
    return folder


def random_q4k_blocks(rows: int, width: int, generator: torch.Generator) -> np.ndarray:
    """Q4_K blocks of a [rows, width] tensor: random indices, sub-block scales and minimums, and
    float16 scales of a tiny model's size."""
    import gguf

    blocks = torch.randint(0, 256, (rows * width // 256, gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q4_K][1]),
                           generator=generator, dtype=torch.uint8).numpy()
    for column in (0, 2):  # d, then dmin
        scales = (torch.rand(len(blocks), 1, generator=generator) * 2e-3 + 2e-4).numpy().astype(np.float16)
        blocks[:, column : column + 2] = scales.view(np.uint8)
    return blocks


def save_tiny_gguf(path: Path, seed: int = 0, quantized_embedding: bool = False,
                   q4k_linears: bool = False, tied_head: bool = False, architecture: str = "qwen2") -> PreTrainedModel:
    """Write a tiny Qwen2 model and the tiny tokenizer as one fp32 GGUF file, as llama.cpp lays it out;
    ``quantized_embedding`` stores the embedding table in Q8_0 blocks, as quantized files do.
    ``q4k_linears``: a model 256 wide whose layers' linears are random Q4_K tensors (the returned
    model holds their dequantized weights). ``tied_head``: no output tensor, so the embedding table is
    the head too (the returned model's head is then not the file's). ``architecture``: the name the
    file gives its architecture."""
    import gguf

    model, tokenizer = tiny_model("qwen2", seed, hidden=256 if q4k_linears else 64), tiny_tokenizer()
    config = model.config
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("tiny-qwen2")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    bpe = json.loads(tokenizer.backend_tokenizer.to_str())["model"]
    tokens = sorted(bpe["vocab"], key=bpe["vocab"].get)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in tokens])  # 3: control, 1: normal
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in bpe["merges"]])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = {"embed_tokens": "token_embd", "norm": "output_norm", "input_layernorm": "attn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    generator = torch.Generator().manual_seed(seed)
    for name, tensor in model.state_dict().items():
        parts = name.removeprefix("model.").split(".")
        if name == "lm_head.weight" and tied_head:
            continue
        if name == "lm_head.weight":
            gguf_name = "output.weight"
        elif parts[0] == "layers":
            gguf_name = f"blk.{parts[1]}.{names['.'.join(parts[2:-1])]}.{parts[-1]}"
        else:
            gguf_name = f"{names['.'.join(parts[:-1])]}.{parts[-1]}"
        if q4k_linears and parts[0] == "layers" and parts[-1] == "weight" and tensor.dim() == 2:
            q4k = gguf.GGMLQuantizationType.Q4_K
            blocks = random_q4k_blocks(*tensor.shape, generator)
            with torch.no_grad():
                tensor.copy_(torch.from_numpy(gguf.quants.dequantize(blocks, q4k).reshape(tensor.shape)))
            writer.add_tensor(gguf_name, blocks.reshape(tensor.shape[0], -1), raw_dtype=q4k)
        elif quantized_embedding and gguf_name == "token_embd.weight":
            q8 = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(gguf_name, gguf.quants.quantize(tensor.float().numpy(), q8), raw_dtype=q8)
        else:
            writer.add_tensor(gguf_name, tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


def prompt(text: str = "def add(a, b):") -> list[int]:
    return tiny_tokenizer().apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=False
    )


def tiny_loaded(model: PreTrainedModel, name: str, role: str, precision: str = "fp32") -> LoadedModel:
    tokenizer = tiny_tokenizer()
    return LoadedModel(
        name=name, model=model, runner=runner_for(model, precision, exact=role == "target"), tokenizer=tokenizer,
        precision=precision, device=torch.device("cpu"), max_context=context_length(model.config),
        eos_ids=eos_token_ids(model.generation_config, tokenizer), vocab_size=model.config.vocab_size, role=role,
    )


def tiny_pair(arch: str = "qwen2", noise: float = 0.02, layers: int = 2) -> ModelPair:
    """A target and its noisy copy as a ``ModelPair``, as the loader would hand it to the app."""
    target = tiny_model(arch, layers=layers)
    return ModelPair(tiny_loaded(target, f"tiny-{arch}", "target"),
                     tiny_loaded(perturbed(target, noise), f"tiny-{arch}-draft", "draft"))


class SlowRunner(WrappedRunner):
    """Wraps a runner so each forward takes a while: long enough to cancel mid-reply."""

    def __init__(self, runner: Runner, delay: float) -> None:
        super().__init__(runner)
        self.delay = delay

    def forward(self, ids: list[int], n_logits: int) -> torch.Tensor:
        time.sleep(self.delay)
        return self.runner.forward(ids, n_logits)
