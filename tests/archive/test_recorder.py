"""The archive's writer: turns written in batches and all of them at shutdown; a failing store costs nothing."""

from __future__ import annotations

from pathlib import Path

import orjson

from inflight.archive.sqlite import SqliteArchive
from inflight.archive.store import ArchiveStore
from inflight.config import Archive, load_settings
from inflight.formats import CHAT_COMPLETIONS
from inflight.pipeline.archiving import Archiver
from inflight.pipeline.engine import Options, build_pipeline
from tests.compaction.test_compactor import agent_conversation


async def archive_turns(store: ArchiveStore, turns: int, errors: list[str]) -> Archiver:
    """`turns` turns of one conversation through a real pipeline, handed to an archiver over `store`."""
    settings = load_settings(None, overrides={"archive": {"enabled": True}})
    pipeline = build_pipeline(settings, summarizers=None)
    archiver = Archiver(
        store,
        settings_for=lambda model: pipeline.model_settings(model).compaction,
        on_error=lambda: errors.append("archive"),
    )
    for n in range(turns):
        payload = {"model": "gpt-4o", "messages": agent_conversation(n, output_lines=2)}
        counted = pipeline.count(orjson.dumps(payload), payload, CHAT_COMPLETIONS)
        assert counted is not None
        accounting = pipeline.account(counted)
        prepared = await pipeline.prepare(counted, accounting, Options())
        archiver.turn(counted, accounting, Options(), prepared, status=200)
    return archiver


async def test_every_turn_is_written_by_the_time_the_archive_is_closed(tmp_path: Path) -> None:
    path = str(tmp_path / "inflight.db")
    errors: list[str] = []
    archiver = await archive_turns(SqliteArchive(path, Archive(enabled=True)), 50, errors)
    await archiver.close()  # within the first batch's 50 ms: close writes it
    reader = SqliteArchive(path, Archive(enabled=True))
    (listed,) = await reader.conversations(10)
    _, turns = await reader.conversation(listed["id"])
    await reader.close()
    assert [turn["n"] for turn in turns] == list(range(1, 51)) and errors == []
    assert turns[0]["tokens"] < turns[-1]["tokens"]


async def test_a_store_that_fails_is_counted_and_never_raises(tmp_path: Path) -> None:
    (tmp_path / "not-a-file.db").mkdir()  # SQLite cannot open a directory
    errors: list[str] = []
    archiver = await archive_turns(SqliteArchive(str(tmp_path / "not-a-file.db"), Archive(enabled=True)), 5, errors)
    await archiver.close()
    assert errors == ["archive"] and archiver.dropped == 5  # one batch of five turns, one failed write
