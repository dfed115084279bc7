"""The bench's sweep of draft variants and tau: every point beside the others on each prompt, one CSV,
the plot, the summary with its draft column, and an MLflow child run per point."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from serving import serving_settings
from tiny import perturbed, save_tiny, tiny_loaded, tiny_model, tiny_pair, tiny_tokenizer

from specdec_tui.bench import cli
from specdec_tui.bench.harness import BenchPlan, run_suite
from specdec_tui.bench.report import (
    distinct_words,
    format_summary,
    paired_ratio,
    point_labels,
    summarize_rows,
)
from specdec_tui.bench.suite import BenchPrompt
from specdec_tui.bench.tracking import bench_log
from specdec_tui.config import load_settings
from specdec_tui.models.loader import ModelPair
from specdec_tui.observability.tracking import PARENT_TAG
from specdec_tui.runtime import Runtime

PROMPTS = [
    BenchPrompt("add", "code", ({"role": "user", "content": "def add(a, b):"},)),
    BenchPrompt("fox", "prose", ({"role": "user", "content": "The quick brown fox"},)),
]


def test_each_drafting_mode_runs_once_per_draft_variant_on_every_prompt_and_stays_lossless():
    pair = tiny_pair()
    noisy = Runtime.from_pair(serving_settings(), pair)
    # The target itself as a draft: every proposal is accepted.
    exact = Runtime.from_pair(serving_settings(), ModelPair(pair.target, tiny_loaded(
        tiny_model("qwen2"), "tiny-qwen2-copy", "draft")))
    plan = BenchPlan(modes=["target", "hybrid", "prompt-lookup"], ks=[3], taus=[1.0, 0.5], max_new_tokens=10,
                     adaptive_k=False, drafts=["noisy", "exact"])
    rows = run_suite(noisy, PROMPTS, plan, draft_runtimes={"exact": exact})
    assert plan.runs_per_prompt() == 1 + 4 + 2
    first = [(r.mode, r.draft, r.tau) for r in rows[:plan.runs_per_prompt()]]
    assert first == [("target", "", 1.0), ("hybrid", "noisy", 1.0), ("hybrid", "noisy", 0.5),
                     ("hybrid", "exact", 1.0), ("hybrid", "exact", 0.5),
                     ("prompt-lookup", "", 1.0), ("prompt-lookup", "", 0.5)]
    assert all(r.identical_to_target for r in rows if r.tau == 1.0)
    # The exact draft is accepted whole at any tau; the noisy one is not, so its tau changes acceptance.
    assert {r.acceptance_rate for r in rows if r.draft == "exact"} == {1.0}
    noisy_rates = [r.acceptance_rate for r in rows if r.draft == "noisy" and r.tau == 1.0]
    assert all(rate < 1.0 for rate in noisy_rates)
    lines = summarize_rows(rows)
    assert {(line.mode, line.draft, line.tau) for line in lines if line.category == "code"} == {
        ("target", "", 1.0), ("hybrid", "noisy", 1.0), ("hybrid", "noisy", 0.5), ("hybrid", "exact", 1.0),
        ("hybrid", "exact", 0.5), ("prompt-lookup", "", 1.0), ("prompt-lookup", "", 0.5)}
    assert format_summary(lines).splitlines()[0].startswith("| category | mode | draft | K | tau |")
    assert list(point_labels(lines).values()) == ["noisy\ntau=1", "noisy\ntau=0.5", "exact\ntau=1", "exact\ntau=0.5"]
    assert distinct_words({"m int4 head32768", "m int8 head32768", "m int4 head-all"}) == {
        "m int4 head32768": "int4 head32768", "m int8 head32768": "int8 head32768", "m int4 head-all": "int4 head-all"}
    exact_code = next(r for r in rows if (r.prompt_id, r.draft, r.tau) == ("add", "exact", 1.0))
    target_code = next(r for r in rows if (r.prompt_id, r.mode) == ("add", "target"))
    assert paired_ratio(rows, "hybrid", "target", "code", ("exact", 3, 1.0)) == pytest.approx(
        exact_code.tokens_per_s / target_code.tokens_per_s)


@pytest.mark.parametrize(("ks", "children"), [([2], 0), ([2, 3], 2)])
def test_one_labelled_draft_makes_a_child_run_per_k_and_tau_not_per_mode(ks: list[int], children: int):
    # The CLI labels its one draft; prompt lookup's rows have no draft: both are one point per (K, tau).
    runtime = Runtime.from_pair(serving_settings(), tiny_pair())
    plan = BenchPlan(modes=["target", "hybrid", "prompt-lookup"], ks=ks, taus=[1.0], max_new_tokens=6,
                     drafts=["tiny int4 head-all"])
    rows = run_suite(runtime, PROMPTS[:1], plan)
    settings, origins = load_settings()
    logged = bench_log(rows, summarize_rows(rows), plan, settings, origins, Path("rows.csv"), None, "specdec-bench",
                       None)
    assert sorted(logged.children) == [("", k, 1.0) for k in ks][:children]
    assert "code/hybrid/k2_tau1/median_tokens_per_s" in logged.metrics  # no draft in a name without a sweep
    for _, metrics in logged.children.values():
        assert {name.split("/")[1] for name in metrics} == {"hybrid", "prompt-lookup"}


def test_a_draft_variant_without_its_runtime_is_refused_before_anything_runs():
    runtime = Runtime.from_pair(serving_settings(), tiny_pair())
    plan = BenchPlan(modes=["target", "hybrid"], ks=[2], taus=[1.0], drafts=["a", "b"])
    with pytest.raises(ValueError, match="no runtime for the draft variants b"):
        run_suite(runtime, PROMPTS, plan)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("sweep")
    target = save_tiny(root / "target")
    perturbed(tiny_model("qwen2"), 0.02).save_pretrained(root / "draft")
    tiny_tokenizer().save_pretrained(root / "draft")
    prompts = root / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": p.id, "category": p.category, "messages": list(p.messages)}) + "\n"
                               for p in PROMPTS))
    return target, root / "draft", prompts


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_the_bench_sweeps_draft_precisions_heads_and_tau_into_one_csv_a_plot_and_child_runs(
        folders: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    target, draft, prompts = folders
    out, plot, uri = tmp_path / "sweep.csv", tmp_path / "sweep.png", f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = cli.main(["--target", str(target), "--precision", "fp32", "--drafts", str(draft),
                     "--draft-precisions", "fp32,int8", "--draft-heads", "0,200", "--taus", "1,0.5", "--ks", "3",
                     "--modes", "target,hybrid", "--prompts", str(prompts), "--new-tokens", "8", "--fixed-k",
                     "--cache-dir", str(tmp_path / "cache"), "--out", str(out), "--plot", str(plot), "--mlflow", uri])
    printed = capsys.readouterr().out
    assert code == 0
    rows = read_csv(out)
    variants = [f"{draft} {precision} head{head}" for precision in ("fp32", "int8") for head in ("-all", "200")]
    hybrid = Counter((r["prompt_id"], r["draft"], r["tau"]) for r in rows if r["mode"] == "hybrid")
    assert hybrid == Counter({(p.id, v, tau): 1 for p in PROMPTS for v in variants for tau in ("1.0", "0.5")})
    assert all(r["identical_to_target"] == "True" for r in rows if r["tau"] == "1.0")
    assert [r["draft"] for r in rows if r["mode"] == "target"] == ["", ""]
    assert "| category | mode | draft | K | tau |" in printed
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    client = MlflowClient(tracking_uri=uri)
    [parent] = [r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()]) if PARENT_TAG not in r.data.tags]
    assert parent.data.params["drafts"] == "; ".join(variants)
    children = client.search_runs([parent.info.experiment_id], f"tags.`{PARENT_TAG}` = '{parent.info.run_id}'")
    points = {(c.data.params["draft_precision"], c.data.params["draft_head_tokens"], c.data.params["tau"])
              for c in children}
    assert len(children) == 8 and points == {(p, h, t) for p in ("fp32", "int8") for h in ("0", "200")
                                             for t in ("1.0", "0.5")}
    child = next(c for c in children if (c.data.params["draft_precision"], c.data.params["draft_head_tokens"],
                                         c.data.params["tau"]) == ("int8", "200", "0.5"))
    speeds = [float(r["tokens_per_s"]) for r in rows if (r["category"], r["draft"], r["tau"]) == (
        "code", variants[3], "0.5")]
    assert child.data.metrics["code/hybrid/k3_tau0.5/median_tokens_per_s"] == pytest.approx(speeds[0])
    key = f"code/hybrid/{variants[3].replace('/', '_').strip('_')}/k3_tau0.5/median_tokens_per_s"
    assert parent.data.metrics[key] == pytest.approx(speeds[0])


def test_a_bad_draft_variant_is_one_line_and_exit_2(folders: tuple[Path, Path, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]):
    target, draft, prompts = folders
    base = ["--target", str(target), "--precision", "fp32", "--prompts", str(prompts),
            "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "x.csv")]
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*base, "--drafts", str(draft), "--draft-precisions", "fp32,int3"])
    assert exit_info.value.code == 2
    assert "unknown draft precision 'int3'" in capsys.readouterr().err
    assert cli.main([*base, "--drafts", f"{draft},{tmp_path / 'missing'}", "--draft-precisions", "fp32"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # not the progress
    assert len(errors) == 1 and errors[0].startswith("specdec-bench: error:") and "missing" in errors[0]
    assert not (tmp_path / "x.csv").exists()


def test_the_bench_keeps_every_replys_token_ids_and_where_each_parts_from_target_only(
        folders: tuple[Path, Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    target, draft, prompts = folders
    out = tmp_path / "runs.csv"
    code = cli.main(["--target", str(target), "--precision", "fp32", "--drafts", str(draft), "--draft-precisions",
                     "fp32", "--taus", "1,0.3", "--ks", "3", "--modes", "target,hybrid", "--prompts", str(prompts),
                     "--new-tokens", "8", "--fixed-k", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)])
    assert code == 0
    rows = read_csv(out)
    replies = [json.loads(line) for line in (tmp_path / "runs.replies.jsonl").read_text().splitlines()]
    assert f"replies: {tmp_path / 'runs.replies.jsonl'}" in capsys.readouterr().out
    keys = ("prompt_id", "mode", "draft", "k", "tau", "repeat")
    assert [tuple(str(reply[key]) for key in keys) for reply in replies] == [tuple(row[key] for key in keys)
                                                                             for row in rows]
    targets = {reply["prompt_id"]: reply["token_ids"] for reply in replies if reply["mode"] == "target"}
    for row, reply in zip(rows, replies, strict=True):
        assert len(reply["token_ids"]) == int(row["new_tokens"])
        ours, theirs = reply["token_ids"], targets[row["prompt_id"]]
        same = 0
        while same < min(len(ours), len(theirs)) and ours[same] == theirs[same]:
            same += 1
        assert row["differs_at"] == ("" if ours == theirs else str(same))
        assert row["identical_to_target"] == str(ours == theirs)
    # A tau under 1 accepts draft tokens the target would not have picked: those rows part somewhere.
    assert all(row["differs_at"] == "" for row in rows if row["tau"] == "1.0")
    assert any(row["differs_at"] not in ("", "0") for row in rows if row["tau"] == "0.3")
