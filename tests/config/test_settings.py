from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inflight.config import ConfigError, interpolate_env, load_settings

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inflight.yaml"
    path.write_text(text)
    return path


def test_defaults_without_file() -> None:
    settings = load_settings(None)
    assert (settings.listen.host, settings.listen.port) == ("127.0.0.1", 8787)
    assert settings.upstream.base_url == "https://api.openai.com/v1"
    assert settings.upstream.read_timeout_s == 600 and settings.upstream.max_connections == 512


def test_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("INFLIGHT_STATE_URL", raising=False)
    monkeypatch.delenv("INFLIGHT_DATA_DIR", raising=False)
    settings = load_settings(ROOT / "config" / "inflight.yaml")
    assert settings.upstream.api_key == ""
    assert settings.state.url == "sqlite:///inflight.db" and settings.compaction.summarize.background_at == 0.6


def test_the_example_config_sends_claude_clients_to_anthropic(monkeypatch: pytest.MonkeyPatch) -> None:
    """README's `inflight serve --config config/inflight.yaml` with `ANTHROPIC_BASE_URL` pointed at it: the
    Messages API goes to Anthropic's, with the client's own key (never the OpenAI key the proxy may hold)."""
    from inflight.http.server import startup_line

    monkeypatch.setenv("INFLIGHT_STATE_URL", "memory://")
    settings = load_settings(ROOT / "config" / "inflight.yaml")
    held = load_settings(None, overrides={"upstream": {"api_key": "sk-openai"}})
    for each in (settings, held):
        messages = each.upstream_for("messages")
        assert messages.base_url == "https://api.anthropic.com/v1" and not messages.api_key
        assert each.upstream_for("chat_completions").base_url == "https://api.openai.com/v1"
        assert each.unserved("messages") is None and each.unserved("gemini") is None
        gemini = each.upstream_for("gemini")  # Gemini CLI's goes to Google's likewise
        assert gemini.base_url == "https://generativelanguage.googleapis.com" and not gemini.api_key
    line = startup_line(settings, workers=1)
    assert ", messages -> https://api.anthropic.com/v1, gemini -> https://generativelanguage.googleapis.com;" in line
    elsewhere = load_settings(None, overrides={"upstream": {"base_url": "http://127.0.0.1:8080/v1"}})
    assert elsewhere.upstream_for("messages").base_url == "http://127.0.0.1:8080/v1"  # llama.cpp serves both


def test_env_interpolation_with_defaults() -> None:
    env = {"KEY": "sk-1", "EMPTY": ""}
    assert interpolate_env("a: ${KEY}", env) == "a: sk-1"
    assert interpolate_env("a: ${MISSING:-fallback}", env) == "a: fallback"
    assert interpolate_env("a: ${EMPTY:-x}", env) == "a: x"
    assert interpolate_env("a: ${MISSING:-}", env) == "a: "
    with pytest.raises(ConfigError, match="MISSING is not set"):
        interpolate_env("a: ${MISSING}", env)


def test_env_in_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLIGHT_TEST_PORT", "9999")
    settings = load_settings(write(tmp_path, "listen: {port: ${INFLIGHT_TEST_PORT}}\n"))
    assert settings.listen.port == 9999


def test_a_variable_that_splits_a_list_or_turns_into_a_map_is_refused_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFLIGHT_TEST_KEYS", "alpha, beta")
    with pytest.raises(ConfigError, match=r"access\.keys: an environment variable's value changed its length"):
        load_settings(write(tmp_path, "access:\n  keys: [${INFLIGHT_TEST_KEYS}]\n"))
    monkeypatch.setenv("INFLIGHT_TEST_URL", "{base_url: http://evil/v1}")
    with pytest.raises(ConfigError, match=r"upstream\.api_key: an environment variable's value changed its shape"):
        load_settings(write(tmp_path, "upstream: {base_url: 'http://x/v1', api_key: ${INFLIGHT_TEST_URL}}\n"))
    # Quoted, the same value is one key; a variable may also name a key, and a number stays a number.
    quoted = 'upstream: {api_key: sk-up}\naccess:\n  keys: ["${INFLIGHT_TEST_KEYS}"]\n'
    assert load_settings(write(tmp_path, quoted)).access.keys == ("alpha, beta",)
    monkeypatch.setenv("INFLIGHT_TEST_MODEL", "my-model")
    monkeypatch.setenv("INFLIGHT_TEST_PORT", "9999")
    text = "listen: {port: ${INFLIGHT_TEST_PORT}}\nmodels:\n  ${INFLIGHT_TEST_MODEL}: {context_window: 8000}\n"
    settings = load_settings(write(tmp_path, text))
    assert settings.listen.port == 9999 and "my-model" in settings.models


def test_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, "upstream:\n  base_ulr: http://x/v1\n"))
    assert "upstream.base_ulr: unknown key" in str(info.value)
    assert "inflight.yaml" in str(info.value)


def test_bad_value_is_named_with_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, "compaction:\n  prune_at: 1.7\n"))
    assert "compaction.prune_at" in str(info.value) and "1.7" in str(info.value)


def test_bad_url_and_not_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"upstream\.base_url"):
        load_settings(write(tmp_path, "upstream: {base_url: ftp://x}\n"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_settings(write(tmp_path, "- a\n- b\n"))


def test_overrides_win_over_file(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: {host: 0.0.0.0, port: 1}\nupstream: {base_url: http://a/v1}\n")
    settings = load_settings(path, overrides={"listen": {"port": 2}, "upstream": {"base_url": "http://b/v1/"}})
    assert (settings.listen.host, settings.listen.port, settings.upstream.base_url) == ("0.0.0.0", 2, "http://b/v1")


def test_cli_reports_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: {prot: 1}\n")
    result = subprocess.run(
        [sys.executable, "-m", "inflight", "serve", "--config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "listen.prot: unknown key" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_variable_on_a_comment_line_is_not_required(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFLIGHT_SURELY_UNSET", raising=False)
    text = "upstream:\n  # api_key: ${INFLIGHT_SURELY_UNSET}\n  api_key: ''\n"
    assert load_settings(write(tmp_path, text)).upstream.api_key == ""


def test_a_summarizer_prompt_file_must_be_there_and_have_sections(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the summarizer prompt"):
        load_settings(None, overrides={"compaction": {"summarize": {"prompt_file": str(tmp_path / "missing.md")}}})
    flat = tmp_path / "flat.md"
    flat.write_text("Summarize the conversation.")
    with pytest.raises(ConfigError, match="names no sections"):
        load_settings(None, overrides={"compaction": {"summarize": {"prompt_file": str(flat)}}})


def test_a_config_error_points_to_the_configuration_reference_without_pydantics_prefix(tmp_path: Path) -> None:
    path = write(tmp_path, "upstreem: {}\nupstream: {base_url: ftp://host/v1}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert "upstreem: unknown key (check the spelling; every key is in docs/configuration.md)" in message
    assert "README" not in message and "Value error" not in message
    assert message.count("got 'ftp://host/v1'") == 1 and message.endswith(f"({path})")


def test_a_yaml_syntax_error_names_the_file_and_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "upstream: {base_url: x\nfoo: [\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    message = str(info.value)
    assert "<unicode string>" not in message and f'in "{path}", line 1' in message


def test_a_url_without_a_scheme_from_the_command_line_is_blamed_on_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(None, overrides={"upstream": {"base_url": "127.0.0.1:8080/v1"}})
    message = str(info.value)
    assert "expected an http:// or https:// URL such as http://127.0.0.1:8080/v1, got '127.0.0.1:8080/v1'" in message
    assert message.endswith("(the command line)") and "built-in defaults" not in message
    path = write(tmp_path, "listen: {port: 9000}\n")
    with pytest.raises(ConfigError) as info:
        load_settings(path, overrides={"upstream": {"base_url": "127.0.0.1:8080/v1"}})
    assert str(info.value).endswith(f"(the command line over {path})")
