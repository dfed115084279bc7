"""Settings sources, precedence, validation messages and the origin report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from specdec_tui.config import (
    ModelSettings,
    SettingsError,
    add_settings_flags,
    describe_settings,
    load_settings,
    settings_from_args,
)


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No developer's own config file or SPECDEC_* variables leak into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith("SPECDEC_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_are_the_lossless_default_pair():
    settings, origins = load_settings()
    assert settings.models.target == "qwen2.5-coder-1.5b"
    assert settings.models.draft == "qwen2.5-coder-0.5b"
    assert settings.decoding.tau == 1.0
    assert set(origins.values()) == {"default"}


def test_file_then_env_then_command_line_each_override_the_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = write(tmp_path, "[decoding]\nk = 3\ntau = 0.9\ntemperature = 0.5\n")
    monkeypatch.setenv("SPECDEC_CONFIG", str(path))
    monkeypatch.setenv("SPECDEC_DECODING__TAU", "0.8")
    monkeypatch.setenv("SPECDEC_DECODING__TEMPERATURE", "0.7")
    settings, origins = load_settings({"decoding": {"temperature": "0.2"}})
    assert (settings.decoding.k, settings.decoding.tau, settings.decoding.temperature) == (3, 0.8, 0.2)
    assert origins["decoding.k"] == f"file {path}"
    assert origins["decoding.tau"] == "env SPECDEC_DECODING__TAU"
    assert origins["decoding.temperature"] == "command line"
    assert origins["decoding.top_p"] == "default"


def test_the_default_config_file_is_read_from_the_user_config_folder(tmp_path: Path):
    folder = tmp_path / "xdg" / "specdec-tui"
    folder.mkdir(parents=True)
    (folder / "config.toml").write_text('[chat]\ntheme = "paper"\n')
    settings, origins = load_settings()
    assert settings.chat.theme == "paper"
    assert origins["chat.theme"].startswith("file ")


def test_an_unknown_key_in_the_file_names_the_key_and_the_file(tmp_path: Path):
    path = write(tmp_path, "[decoding]\nkk = 3\n")
    with pytest.raises(SettingsError, match=f"unknown key decoding.kk in {path}"):
        load_settings(config=path)


def test_an_unknown_table_in_the_file_is_named(tmp_path: Path):
    path = write(tmp_path, "[decode]\nk = 3\n")
    with pytest.raises(SettingsError, match=r"unknown table \[decode\]"):
        load_settings(config=path)


def test_invalid_toml_is_reported(tmp_path: Path):
    path = write(tmp_path, "[decoding\nk = 3\n")
    with pytest.raises(SettingsError, match="is not valid TOML"):
        load_settings(config=path)


def test_a_missing_named_config_file_is_an_error(tmp_path: Path):
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(config=tmp_path / "nope.toml")


@pytest.mark.parametrize(
    "group, name, value, message",
    [
        ("decoding", "k", "0", "decoding.k = '0' .*greater than or equal to 1"),
        ("decoding", "k", "33", "less than or equal to 32"),
        ("decoding", "tau", "0", "decoding.tau .*greater than 0"),
        ("decoding", "tau", "1.5", "less than or equal to 1"),
        ("decoding", "temperature", "-1", "greater than or equal to 0"),
        ("decoding", "top_p", "0", "greater than 0"),
        ("decoding", "lookup_k", "33", "decoding.lookup_k = '33' .*less than or equal to 32"),
        ("decoding", "lookup_k", "-1", "greater than or equal to 0"),
        ("decoding", "drafter", "oracle", "decoding.drafter = 'oracle' .*: unknown mode 'oracle'; expected one of model, prompt-lookup, hybrid$"),
        ("models", "precision", "int3", "models.precision"),
    ],
)
def test_out_of_range_values_get_one_line_messages_with_their_source(group, name, value, message):
    with pytest.raises(SettingsError, match=message) as info:
        load_settings({group: {name: value}})
    assert "(from command line)" in str(info.value)
    assert "\n" not in str(info.value)


def test_a_bad_env_value_names_the_variable(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECDEC_DECODING__K", "40")
    with pytest.raises(SettingsError, match="from env SPECDEC_DECODING__K"):
        load_settings()


def test_an_unknown_nested_env_variable_is_an_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECDEC_DECODING__KAY", "4")
    with pytest.raises(SettingsError, match="unknown setting decoding.kay .*SPECDEC_DECODING__KAY"):
        load_settings()


def test_flags_map_onto_settings_and_the_report_shows_origins(tmp_path: Path):
    parser = argparse.ArgumentParser()
    add_settings_flags(parser)
    args = parser.parse_args(["--k", "7", "--tau", "0.5", "--theme", "paper", "--history", str(tmp_path / "h.db")])
    settings, origins = settings_from_args(args)
    assert settings.decoding.k == 7
    assert settings.chat.history_path == tmp_path / "h.db"
    report = describe_settings(settings, origins)
    assert "decoding.k = 7" in report
    line = next(line for line in report.splitlines() if line.startswith("decoding.tau"))
    assert line.endswith("# command line")
    assert len(report.splitlines()) == len(origins)


def test_tests_never_see_the_developers_own_config_environment_or_history():
    settings, origins = load_settings()
    assert all(origin == "default" for origin in origins.values())
    assert not any(name.startswith("SPECDEC_") for name in os.environ)
    assert str(settings.chat.history_path).startswith(os.environ["XDG_DATA_HOME"])


def test_specdec_faults_sets_several_faults_at_once_and_show_settings_says_they_are_on(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECDEC_FAULTS", "target.raise=0.2, draft.nan=0.1, target.hang_ms=50, seed=3")
    settings, origins = load_settings()
    faults = settings.faults
    assert (faults.target_raise, faults.draft_nan, faults.target_hang_ms, faults.seed) == (0.2, 0.1, 50.0, 3)
    assert origins["faults.target_raise"] == "env SPECDEC_FAULTS" and origins["faults.draft_raise"] == "default"
    shown = describe_settings(settings, origins)
    assert shown.splitlines()[-1] == "# FAULT INJECTION IS ON: target.raise=0.2, draft.nan=0.1 (seed 3)"


def test_faults_are_off_by_default_and_bad_faults_are_one_line_errors(monkeypatch: pytest.MonkeyPatch):
    settings, origins = load_settings()
    assert not settings.faults.enabled and "FAULT" not in describe_settings(settings, origins)
    for spec, message in (("target.raise=1.5", "less than or equal to 1"), ("target.raise", "is not name=value"),
                          ("target.explode=0.1", "unknown setting faults.target_explode")):
        monkeypatch.setenv("SPECDEC_FAULTS", spec)
        with pytest.raises(SettingsError, match=message) as error:
            load_settings()
        assert "\n" not in str(error.value) and "SPECDEC_FAULTS" in str(error.value)


def test_resilience_settings_are_validated(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECDEC_RESILIENCE__FAIL_MAX", "0")
    with pytest.raises(SettingsError, match="resilience.fail_max = '0'"):
        load_settings()


def test_the_drafts_cache_is_kv_caches_unless_draft_kv_cache_says_otherwise():
    assert ModelSettings().draft_cache == "float32"
    assert ModelSettings(kv_cache="float16").draft_cache == "float16"
    assert ModelSettings(kv_cache="float16", draft_kv_cache="float32").draft_cache == "float32"
    assert ModelSettings(draft_kv_cache="float16").draft_cache == "float16"
