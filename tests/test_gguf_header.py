"""The package's GGUF header reader: gguf's own reader's tensors, the architecture and a tokenizer digest."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from specdec_tui.models.gguf_header import read_header


def write_gguf(path: Path, tokens: list[str], chat_template: str = "{{ messages }}", alignment: int | None = None,
               endian: gguf.GGUFEndian = gguf.GGUFEndian.LITTLE, seed: int = 0) -> None:
    """A small GGUF file with metadata of every kind a header holds and tensors of several types."""
    writer = gguf.GGUFWriter(str(path), "qwen2", endianess=endian)
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    writer.add_name("tiny")
    writer.add_context_length(64)
    writer.add_rope_freq_base(10000.0)
    writer.add_bool("tiny.flag", True)
    writer.add_float64("tiny.ratio", 0.5)
    writer.add_array("tiny.sizes", [1, 2, 3])
    writer.add_array("tiny.weights", [0.25, 0.5])
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * len(tokens))
    writer.add_token_merges(["a b", "ab c"])
    writer.add_eos_token_id(1)
    writer.add_chat_template(chat_template)
    generator = np.random.default_rng(seed)
    writer.add_tensor("token_embd.weight", generator.standard_normal((len(tokens), 32)).astype(np.float32))
    writer.add_tensor("output_norm.weight", generator.standard_normal(32).astype(np.float16))
    q8 = gguf.GGMLQuantizationType.Q8_0
    writer.add_tensor("blk.0.ffn_up.weight", gguf.quants.quantize(generator.standard_normal((3, 64)).astype(np.float32), q8),
                      raw_dtype=q8)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def ggufs_own_reading(path: Path) -> tuple[dict, str]:
    reader = gguf.GGUFReader(path)
    field = reader.fields["general.architecture"]
    tensors = {t.name: (t.tensor_type, tuple(int(n) for n in t.shape), int(t.data_offset), int(t.n_bytes),
                        int(t.n_elements)) for t in reader.tensors}
    return tensors, bytes(field.parts[field.data[0]]).decode()


@pytest.mark.parametrize("alignment", [None, 64, 256])
def test_the_header_reader_gives_ggufs_own_readers_tensors_and_architecture(tmp_path: Path, alignment: int | None):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, ["a", "b", "ab", "abc"], alignment=alignment)
    header = read_header(path)
    tensors = {t.name: (t.tensor_type, t.shape, t.data_offset, t.n_bytes, t.n_elements) for t in header.tensors.values()}
    assert (tensors, header.architecture) == ggufs_own_reading(path)
    assert list(header.tensors) == ["token_embd.weight", "output_norm.weight", "blk.0.ffn_up.weight"]


def test_files_with_the_same_tokenizer_share_a_digest_whatever_their_weights_and_chat_templates(tmp_path: Path):
    write_gguf(tmp_path / "a.gguf", ["a", "b", "ab", "abc"], seed=0)
    write_gguf(tmp_path / "b.gguf", ["a", "b", "ab", "abc"], chat_template="{{ other }}", seed=1)
    write_gguf(tmp_path / "c.gguf", ["a", "b", "ab", "abd"], seed=0)
    a, b, c = (read_header(tmp_path / f"{name}.gguf").tokenizer_digest for name in "abc")
    assert a == b
    assert a != c


def test_a_file_that_is_not_a_whole_little_endian_gguf_file_is_a_one_line_error(tmp_path: Path):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, ["a", "b"])
    whole = path.read_bytes()
    cases = {
        "it does not start with b'GGUF'": b"GGUX" + whole[4:],
        "the file ends inside its header": whole[:60],
        "the file ends inside tensor blk.0.ffn_up.weight": whole[:-100],
        "too short for a GGUF header": whole[:10],
    }
    for message, data in cases.items():
        path.write_bytes(data)
        with pytest.raises(ValueError, match=message) as info:
            read_header(path)
        assert "\n" not in str(info.value)
    write_gguf(path, ["a", "b"], endian=gguf.GGUFEndian.BIG)
    with pytest.raises(ValueError, match="a big-endian file"):
        read_header(path)


def fields_of(reader: gguf.GGUFReader) -> dict[str, list]:
    return {key: [field.parts[i].tolist() for i in field.data] for key, field in reader.fields.items()
            if not key.startswith("GGUF.")}


@pytest.mark.parametrize("alignment", [None, 256])
def test_the_config_copy_holds_every_field_but_the_tokenizers_arrays_and_the_same_tensors(tmp_path: Path,
                                                                                        alignment: int | None):
    path = tmp_path / "tiny.gguf"
    write_gguf(path, ["a", "b", "ab", "abc"], alignment=alignment)
    copy = read_header(path).config_copy(tmp_path / "copy.gguf")
    whole, trimmed = gguf.GGUFReader(path), gguf.GGUFReader(copy)
    arrays = {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"}
    expected = {key: value for key, value in fields_of(whole).items() if key not in arrays}
    assert fields_of(trimmed) == {**expected, "qwen2.vocab_size": [[4]]}
    assert [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset - trimmed.data_offset) for t in trimmed.tensors] == \
        [(t.name, t.tensor_type, t.shape.tolist(), t.data_offset - whole.data_offset) for t in whole.tensors]
    assert copy.stat().st_size - trimmed.data_offset == path.stat().st_size - whole.data_offset
    # a file that states its vocabulary's size keeps that one field
    writer = gguf.GGUFWriter(str(tmp_path / "sized.gguf"), "qwen2")
    writer.add_vocab_size(7)
    writer.add_token_list(["a", "b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    sized = gguf.GGUFReader(read_header(tmp_path / "sized.gguf").config_copy(tmp_path / "sized-copy.gguf"))
    assert fields_of(sized)["qwen2.vocab_size"] == [[7]] and "tokenizer.ggml.tokens" not in sized.fields
