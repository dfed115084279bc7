"""A GGUF file's header as a load needs it: each tensor's name, type, shape and place in the file,
the file's architecture, and a digest of its tokenizer.

gguf's own reader turns every metadata value into arrays of its own, one or two per string of the
151,936-token vocabulary and its merges: 6.5-7 s for each of the default pair's files, on every
first start. This reader steps over the values it does not need (a string array by its lengths
alone) and reads the tensor infos after them: the same tensors, in a fraction of a second.

Transformers makes a GGUF file's configuration from its header with gguf's reader too, 8.5-9 s a
file, nearly all of it the tokenizer's arrays, which no configuration reads. ``config_copy`` writes the
header without them (and with the vocabulary's size, which transformers otherwise counts from them),
over a sparse data section of the file's size: transformers reads the same configuration from it in
0.03 s.

Transformers makes a GGUF file's tokenizer from its ``tokenizer.*`` metadata and its architecture
(about 1 s for the default target's, told the model type; 9 s more when it reads the configuration
through gguf's reader first). Files whose digests match have the same vocabulary, merges and special
tokens, so a pair of one family makes its tokenizer once. The digest leaves out the chat
template, as a pair's shared tokenizer files do: a reply's prompt is the target's (the default pair's
two files carry different templates).
"""

from __future__ import annotations

import hashlib
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
#: Bytes of each scalar value type (GGUF's uint8, int8, uint16, int16, uint32, int32, float32, bool,
#: uint64, int64, float64).
SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, UINT32 = 8, 9, 4
CHAT_TEMPLATE = "tokenizer.chat_template"
TOKENS = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class GgufTensor:
    name: str
    tensor_type: GGMLQuantizationType
    #: As the file stores it: the row width first.
    shape: tuple[int, ...]
    #: Where its data starts in the file.
    data_offset: int

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def n_bytes(self) -> int:
        block, block_bytes = GGML_QUANT_SIZES[self.tensor_type]
        return self.n_elements // block * block_bytes


@dataclass(frozen=True)
class GgufHeader:
    tensors: dict[str, GgufTensor]
    #: ``general.architecture``; empty where the file does not say.
    architecture: str
    #: SHA-256 of the architecture and of every ``tokenizer.*`` field but the chat template, as the file
    #: stores them.
    tokenizer_digest: str
    #: The header without the tokenizer's arrays, ``<architecture>.vocab_size`` added where it is
    #: missing, up to where the data section starts.
    config_header: bytes
    #: The data section's size in the file.
    data_bytes: int

    def config_copy(self, path: Path) -> Path:
        """Write ``config_header`` to ``path`` over a data section of ``data_bytes`` that takes no disk
        (a sparse file): what transformers reads a configuration from, as from the whole file."""
        with open(path, "wb") as file:
            file.write(self.config_header)
            file.truncate(len(self.config_header) + self.data_bytes)
        return path


class _Cursor:
    """Little-endian values read one after another from a buffer."""

    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.at = data, 0

    def unpack(self, form: str) -> int:
        (value,) = struct.unpack_from(form, self.data, self.at)
        self.at += struct.calcsize(form)
        return value

    def string(self) -> str:
        length = self.unpack("<Q")
        text = self.data[self.at : self.at + length]
        if len(text) != length:
            raise ValueError("the file ends inside a string")
        self.at += length
        return text.decode("utf-8", errors="replace")

    def skip(self, value_type: int) -> None:
        """Step over one value of ``value_type``."""
        if value_type in SCALAR_SIZES:
            self.at += SCALAR_SIZES[value_type]
        elif value_type == STRING:
            self.at += 8 + self.unpack("<Q")
        elif value_type == ARRAY:
            item_type, count = self.unpack("<I"), self.unpack("<Q")
            if item_type in SCALAR_SIZES:
                self.at += count * SCALAR_SIZES[item_type]
            else:
                for _ in range(count):
                    self.skip(item_type)
        else:
            raise ValueError(f"unknown metadata value type {value_type}")


def read_header(path: Path) -> GgufHeader:
    """``path``'s tensors, architecture and tokenizer digest; a ValueError saying what is wrong for a
    file that is not a whole little-endian GGUF file of version 2 or 3."""
    with open(path, "rb") as file:
        size = file.seek(0, 2)
        if size < 24:
            raise ValueError(f"{size} bytes is too short for a GGUF header")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
            try:
                return _parse(data, size)
            except struct.error as exc:
                raise ValueError("the file ends inside its header") from exc


def _parse(data: mmap.mmap, size: int) -> GgufHeader:
    if data[:4] != MAGIC:
        raise ValueError(f"it does not start with {MAGIC!r}")
    cursor = _Cursor(data)
    cursor.at = 4
    version = cursor.unpack("<I")
    if version not in VERSIONS:
        byte_swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        detail = " (a big-endian file)" if byte_swapped in VERSIONS else ""
        raise ValueError(f"GGUF version {version}{detail} is not one of {VERSIONS}")
    tensor_count, field_count = cursor.unpack("<Q"), cursor.unpack("<Q")
    architecture, alignment = "", DEFAULT_ALIGNMENT
    tokenizer = hashlib.sha256()
    kept: list[bytes] = []  # every field but the tokenizer's arrays, as stored
    keys, tokens = set(), None
    for _ in range(field_count):
        start = cursor.at
        key, value_type = cursor.string(), cursor.unpack("<I")
        keys.add(key)
        if key == "general.architecture" and value_type == STRING:
            architecture = cursor.string()
        elif key == "general.alignment" and value_type == UINT32:
            alignment = cursor.unpack("<I")
        else:
            if key == TOKENS and value_type == ARRAY:
                (tokens,) = struct.unpack_from("<Q", data, cursor.at + 4)  # after the item type: the count
            cursor.skip(value_type)
        if key.startswith("tokenizer.") and key != CHAT_TEMPLATE:
            tokenizer.update(data[start : cursor.at])
        if not (key.startswith("tokenizer.") and value_type == ARRAY):
            kept.append(data[start : cursor.at])
    if alignment <= 0:
        raise ValueError(f"general.alignment {alignment} is not positive")
    vocab_key = f"{architecture}.vocab_size"
    if tokens is not None and vocab_key not in keys:
        kept.append(_string(vocab_key) + struct.pack("<II", UINT32, tokens))
    infos_start = cursor.at
    infos = []
    for _ in range(tensor_count):
        name = cursor.string()
        dims = cursor.unpack("<I")
        shape = tuple(cursor.unpack("<Q") for _ in range(dims))
        type_id, offset = cursor.unpack("<I"), cursor.unpack("<Q")
        try:
            tensor_type = GGMLQuantizationType(type_id)
        except ValueError as exc:
            raise ValueError(f"tensor {name} has unknown type {type_id}") from exc
        infos.append((name, tensor_type, shape, offset))
    start = -(-cursor.at // alignment) * alignment
    config_header = b"".join([MAGIC, struct.pack("<IQQ", version, tensor_count, len(kept)), *kept,
                              data[infos_start : cursor.at]])
    config_header += bytes(-len(config_header) % alignment)
    tensors = {}
    for name, tensor_type, shape, offset in infos:
        tensor = GgufTensor(name, tensor_type, shape, start + offset)
        if tensor.data_offset + tensor.n_bytes > size:
            raise ValueError(f"the file ends inside tensor {name}")
        tensors[name] = tensor
    tokenizer.update(architecture.encode())
    return GgufHeader(tensors, architecture, tokenizer.hexdigest(), config_header, size - start)


def _string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<Q", len(encoded)) + encoded
