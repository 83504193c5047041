"""The per-request log line: built once, and no value can forge a line or a field."""

from __future__ import annotations

import logging

import pytest

from inflight.http.exchange import Exchange, clean


def test_control_characters_and_spaces_are_escaped() -> None:
    assert clean("gpt-4o") == "gpt-4o"
    assert clean("evil\nPOST /v1/forged 200") == "evil\\nPOST\\x20/v1/forged\\x20200"
    assert clean("a=b c\x1b[31m") == "a=b\\x20c\\x1b[31m"


def test_a_field_is_clipped_so_a_client_cannot_fill_the_log() -> None:
    model = "m" * 2_000_000  # a 2 MB model name, logged on every request it is sent with
    assert clean(model) == "m" * 256 + "...(+1999744)"


def test_the_line_is_written_once_with_its_fields_in_order(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="inflight")
    exchange = Exchange("POST", "/v1/chat/completions")
    exchange.status = 200
    exchange.note("model", "m\nx")
    exchange.note_all({"tokens": "10/100", "key": "session:a b"})
    exchange.finish()
    exchange.finish()
    [line] = [record.getMessage() for record in caplog.records]
    fields = "model=m\\nx tokens=10/100 key=session:a\\x20b"
    assert line.startswith(f"POST /v1/chat/completions 200 {fields} proxy_ms=- upstream_ms=- ")
    assert "\n" not in line
