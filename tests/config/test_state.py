"""`state.url`: relative SQLite paths under the data directory (`INFLIGHT_DATA_DIR`), and the URL as a log shows it."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from inflight.archive import TurnWrite, open_archive
from inflight.config import State, load_settings
from inflight.records import open_record_store


def write_config(tmp_path: Path, state_url: str) -> Path:
    path = tmp_path / "inflight.yaml"
    path.write_text(f'state: {{url: "{state_url}"}}\narchive: {{enabled: true}}\n')
    return path


def test_a_relative_sqlite_path_resolves_under_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("INFLIGHT_DATA_DIR", str(data))
    settings = load_settings(write_config(tmp_path, "sqlite:///state/inflight.db"))
    assert settings.state.url == f"sqlite:///{data}/state/inflight.db"
    assert settings.state.sqlite_path == f"{data}/state/inflight.db"


def test_an_absolute_path_and_other_stores_ignore_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFLIGHT_DATA_DIR", str(tmp_path / "data"))
    for url in (f"sqlite:///{tmp_path}/elsewhere.db", "memory://", "redis://127.0.0.1:6379/0"):
        assert load_settings(write_config(tmp_path, url)).state.url == url


def test_without_a_data_directory_a_relative_path_stays_under_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_config(tmp_path, "sqlite:///inflight.db")
    monkeypatch.delenv("INFLIGHT_DATA_DIR", raising=False)
    assert load_settings(config).state.url == "sqlite:///inflight.db"
    monkeypatch.setenv("INFLIGHT_DATA_DIR", "")  # set but empty (`-e INFLIGHT_DATA_DIR=`): none either
    assert load_settings(config).state.url == "sqlite:///inflight.db"


def test_the_example_config_keeps_records_and_archive_in_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the image runs it: the example config mounted, `INFLIGHT_DATA_DIR` set, the working directory
    elsewhere. The records and the archive's tables land in one file in the data directory."""
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("INFLIGHT_DATA_DIR", str(data))
    monkeypatch.delenv("INFLIGHT_STATE_URL", raising=False)
    monkeypatch.setenv("INFLIGHT_ARCHIVE", "true")
    settings = load_settings(Path(__file__).resolve().parents[2] / "config" / "inflight.yaml")

    async def use() -> None:
        records = open_record_store(settings.state, settings.compaction.cache)
        assert await records.lease("lease:one", "me", ttl_s=60)  # any write to the store
        await records.close()
        archive = open_archive(settings.state, settings.archive)
        await archive.add_turns([TurnWrite("c1", "gpt-4o", {"time": time.time(), "model": "gpt-4o", "tokens": 1})])
        await archive.close()

    asyncio.run(use())
    assert list(work.iterdir()) == []
    with sqlite3.connect(data / "inflight.db") as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        leases = db.execute("SELECT COUNT(*) FROM leases").fetchone()[0]
    assert {"records", "leases"} <= tables and len(tables) > 2 and leases == 1  # the archive's tables beside them


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@cache.internal:6379/0", "redis://:***@cache.internal:6379/0"),
        ("rediss://default:p%40ss@cache:6380/1", "rediss://default:***@cache:6380/1"),
        ("redis://cache:6379/0?password=s3cret&socket_timeout=2", "redis://cache:6379/0?password=***&socket_timeout=2"),
        ("redis://cache:6379/0", "redis://cache:6379/0"),
        ("sqlite:////var/lib/inflight/inflight.db", "sqlite:////var/lib/inflight/inflight.db"),
        ("memory://", "memory://"),
    ],
)
def test_the_url_as_logged_hides_the_password(url: str, shown: str) -> None:
    assert State(url=url).redacted_url == shown
