"""specdec-bench steps on the tiny models: the verify curve and the draft's cost, and the command."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny import perturbed, save_tiny, tiny_model, tiny_pair, tiny_tokenizer

from specdec_tui.bench import cli
from specdec_tui.bench.steps import cpu_flags, format_costs, measure
from specdec_tui.models import quantized_kernels


def test_the_verify_curve_starts_at_one_and_every_cost_is_measured():
    pair = tiny_pair()
    costs = measure(pair, contexts=[16, 64], rows=[2, 5], min_time=0.02)
    assert costs.rows == (1, 2, 5)
    assert all(seconds > 0 for seconds in costs.target.values()) and set(costs.target) == {
        (n, m) for n in (16, 64) for m in (1, 2, 5)}
    assert costs.v(16, 1) == 1.0 and costs.c(64) == costs.draft[64] / costs.target[64, 1]
    table = format_costs(costs)
    assert table.splitlines()[0] == "| rows M | ctx 16: ms | v(M) | ctx 64: ms | v(M) |"
    assert "draft token after 64:" in table


def test_a_pass_is_measured_after_a_context_and_leaves_the_cache_where_it_was():
    pair = tiny_pair()
    runner = pair.target.runner
    measure(pair, contexts=[20], rows=[3], min_time=0.01)
    runner.forward([5, 6], 1)  # the cache was reset after measuring: positions restart at 0
    assert runner.length == 2


def test_cpu_flags_name_the_processor_and_its_vector_extensions(tmp_path: Path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: Some CPU @ 2GHz\nflags\t\t: fpu sse avx2 fma avx512f avx512_vnni\n")
    assert cpu_flags(cpuinfo) == ("Some CPU @ 2GHz", ["avx2", "fma", "avx512f", "avx512_vnni"])
    assert cpu_flags(tmp_path / "missing") == ("unknown", [])


def test_the_steps_command_prints_the_table_for_model_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    target = save_tiny(tmp_path / "target")
    perturbed(tiny_model("qwen2"), 0.02).save_pretrained(tmp_path / "draft")
    tiny_tokenizer().save_pretrained(tmp_path / "draft")
    code = cli.main(["steps", "--target", str(target), "--draft", str(tmp_path / "draft"), "--precision", "fp32",
                     "--draft-precision", "fp32", "--cache-dir", str(tmp_path / "c"), "--contexts", "8,32",
                     "--rows", "1,4", "--min-time", "0.01"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("CPU: ") and "| 4 |" in out and "c = draft / target" in out
    runs = quantized_kernels.instruction_sets()
    if runs:  # the products the kernels use here are named, the fastest unless asked otherwise
        assert f"the package's kernels, {runs[0]} products (this CPU runs {', '.join(runs)})" in out.splitlines()[0]
        assert cli.main(["steps", "--target", str(target), "--draft", str(tmp_path / "draft"), "--precision", "int8",
                         "--draft-precision", "fp32",
                         "--cache-dir", str(tmp_path / "c"), "--contexts", "8", "--rows", "1,2", "--min-time", "0.01",
                         "--instruction-set", "avx2"]) == 0
        assert "the package's kernels, avx2 products" in capsys.readouterr().out
    assert cli.main(["steps", "--target", str(target), "--cache-dir", str(tmp_path / "c"),
                     "--instruction-set", "sse4"]) == 2
    assert capsys.readouterr().err.strip().startswith("specdec-bench steps: error: this CPU cannot run the kernels' "
                                                       "sse4 products (it runs ")
    assert cli.main(["steps", "--target", str(target), "--draft", str(tmp_path / "draft"), "--precision", "fp32",
                     "--cache-dir", str(tmp_path / "c"), "--contexts", "250", "--rows", "16"]) == 2
    assert "does not fit the target's 256 tokens" in capsys.readouterr().err
