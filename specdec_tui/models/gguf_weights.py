"""A GGUF file's weights read straight into the lean forward, one linear at a time.

Through transformers, a first start dequantized every tensor of the file into a float32 model (6 GB
for the default 1.5B target) before packing it: 170-175 s and a 13 GB peak for the default pair,
against 106-110 s and 4.0 GB this way. Here each linear is dequantized only while it is packed, with
the function transformers uses (gguf's ``dequantize``), so the packed weights are the same bits.
Only architectures whose tensors transformers takes as they are stored qualify: it reorders Llama's
query and key rows, for one.

The header is read by ``gguf_header`` (gguf's own reader took 6.5-7 s a file). Tensors are read with
``pread``, not through the file's memory mapping, so the pages read count
toward the system's file cache and not the process's resident memory; a large one is dequantized a
slice of rows at a time, so gguf's temporaries are a slice's.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType, dequantize
from torch import nn

from specdec_tui.models.gguf_header import GgufTensor, read_header
from specdec_tui.models.precision import float_linear

#: Architectures (``general.architecture``) whose tensors transformers loads unchanged.
AS_STORED = frozenset({"qwen2"})
FLOAT_TYPES = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}
ROWS_AT_ONCE = 8192


class GgufWeights:
    """The named tensors of a GGUF file, read and dequantized on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.header = read_header(path)
        except ValueError as exc:
            raise ValueError(f"{path.name} is not a whole GGUF file ({exc})") from exc

    @property
    def tensors(self) -> dict[str, GgufTensor]:
        return self.header.tensors

    @property
    def architecture(self) -> str:
        return self.header.architecture

    @property
    def tokenizer_digest(self) -> str:
        return self.header.tokenizer_digest

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def raw(self, name: str) -> np.ndarray:
        """``name``'s stored values: [rows, width] of its float type, or [rows, bytes a row] of blocks."""
        tensor = self.tensors[name]
        stored = np.empty(tensor.n_bytes, dtype=np.uint8)
        with open(self.path, "rb") as file:
            done = 0
            while done < stored.size:  # one read returns at most about 2 GB
                read = os.preadv(file.fileno(), [stored[done:]], tensor.data_offset + done)
                if read <= 0:
                    raise ValueError(f"{self.path.name} ends inside tensor {name}")
                done += read
        rows = tensor.n_elements // tensor.shape[0]
        if tensor.tensor_type in FLOAT_TYPES:
            return stored.view(FLOAT_TYPES[tensor.tensor_type]).reshape(rows, tensor.shape[0])
        return stored.reshape(rows, -1)

    def tensor(self, name: str) -> torch.Tensor:
        """``name`` as float32, [rows, width] for a matrix, as transformers loads it."""
        tensor = self.tensors[name]
        stored = self.raw(name)
        values = torch.empty(stored.shape[0], tensor.shape[0])
        for start in range(0, stored.shape[0], ROWS_AT_ONCE):
            rows = dequantize(stored[start : start + ROWS_AT_ONCE], tensor.tensor_type)
            values[start : start + ROWS_AT_ONCE] = torch.from_numpy(np.asarray(rows, dtype=np.float32))
        return values if len(tensor.shape) > 1 else values.reshape(-1)

    def blocks(self, name: str) -> tuple[torch.Tensor, int] | None:
        """``name``'s quantized blocks ([rows, bytes a row]) and their type; None for a float tensor."""
        tensor = self.tensors[name]
        if tensor.tensor_type in FLOAT_TYPES:
            return None
        return torch.from_numpy(self.raw(name)), int(tensor.tensor_type)

    def linear(self, stem: str) -> nn.Linear:
        """The linear of tensors ``stem``.weight and, where the file has it, ``stem``.bias."""
        bias = self.tensor(f"{stem}.bias") if f"{stem}.bias" in self else None
        return float_linear(self.tensor(f"{stem}.weight"), bias)
