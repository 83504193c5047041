"""`inflight demo` as a user runs it: a subprocess that replays the shipped conversation, and `--serve`."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx

from inflight.demo.run import load_trace
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d,]+)\*?\s+([\d,]+)\s+(\d+%)?\s+(\S.*)$")
TOTAL = re.compile(r"^\s*all\s+([\d,]+)\s+([\d,]+)\s+(?:\d+%)?\s+(\d+) of (\d+) turns compacted$")
SUMMARIES = re.compile(r"^summarizer calls: (\d+) ")
TURNS = "6"  # at a 6,000-token window, enough for the conversation to outgrow its budget, and quick


def number(text: str) -> int:
    return int(text.replace(",", ""))


def demo(*args: str) -> list[str]:
    return demo_run(*args).stdout.splitlines()


def demo_run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "inflight", "demo", *args]
    result = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


def test_the_demo_replays_the_conversation_through_the_proxy_and_compacts_it() -> None:
    lines = demo("--turns", TURNS, "--window", "6000")
    rows = [match.groups() for match in map(ROW.match, lines) if match]
    assert [int(row[0]) for row in rows] == list(range(1, int(TURNS) + 1))
    messages = [int(row[1]) for row in rows]
    assert messages == sorted(messages) and len(set(messages)) == len(messages)  # each turn adds to the last
    client, sent = [number(row[2]) for row in rows], [number(row[3]) for row in rows]
    assert client == sorted(client)
    compacted = [i for i in range(len(rows)) if sent[i] < client[i]]
    assert compacted, "no turn was compacted"
    assert all(rows[i][4] and rows[i][5] != "none" for i in compacted)  # a saving, and what was done
    assert rows[0][5] == "none" and sent[0] == client[0]  # the task alone is far below the window
    # A turn that took nothing off made no compaction: it cannot have come too soon after the last (`churn`).
    assert all(sent[i] < client[i] for i in range(len(rows)) if "churn" in rows[i][5]), rows
    totals = next(match for match in map(TOTAL.match, lines) if match)
    assert (number(totals[1]), number(totals[2])) == (sum(client), sum(sent))
    assert (int(totals[3]), int(totals[4])) == (len(compacted), len(rows))
    assert int(next(match for match in map(SUMMARIES.match, lines) if match)[1]) >= 1
    said = re.search(r"^(\d+) (compactions?) made \(the viewer's count\)", "\n".join(lines), re.M)
    assert said and (said[2] == "compaction") == (said[1] == "1"), lines  # "1 compaction", "2 compactions"


def test_the_window_decides_when_it_compacts() -> None:
    """At a window larger than the whole conversation nothing is done to it."""
    lines = demo("--turns", TURNS, "--window", "100000")
    rows = [match.groups() for match in map(ROW.match, lines) if match]
    assert len(rows) == int(TURNS)
    assert all(row[2] == row[3] and row[5] == "none" for row in rows)
    assert int(next(match for match in map(SUMMARIES.match, lines) if match)[1]) == 0


def test_a_window_too_small_for_a_summary_gives_up_on_summaries_at_once_and_the_table_explains_itself() -> None:
    """At a 2,000-token window no summary request can fit the summarizer's window: the background job that
    finds so is not retried, nor started again on the next turns."""
    result = demo_run("--window", "2000")
    assert result.stderr.count("SummarizerTooSmall") == 1, result.stderr
    assert "trying once more" not in result.stderr
    lines = result.stdout.splitlines()
    assert any("budget: the most it sends upstream; the rest is kept for the reply" in line for line in lines)
    explained = {line.split()[0] for line in lines[lines.index("actions:") + 1 :]}
    shown = {action for line in lines if (row := ROW.match(line)) for action in re.split(r"[, ]+", row[6]) if action}
    assert "churn" in shown and shown - {"none"} <= explained, (shown, explained)


def wrapped_rows(lines: list[str]) -> list[tuple[str, ...]]:
    """The table's rows, each with its actions column whole: the lines an action wraps onto joined to it."""
    rows: list[list[str]] = []
    for line in lines:
        match = ROW.match(line)
        if match:
            rows.append(list(match.groups()))
        elif rows and line.startswith(" " * 40) and line.strip():
            rows[-1][5] += " " + line.strip()
        elif not line.strip() or line.startswith("─"):
            continue
    return [tuple(row) for row in rows]


def test_under_a_shadow_config_it_shows_what_would_have_been_sent(tmp_path: Path) -> None:
    config = tmp_path / "shadow.yaml"
    config.write_text("compaction: {mode: shadow}\n")
    lines = demo("--config", str(config))  # every turn: those over the window are refused, and it still exits 0
    rows = wrapped_rows(lines)
    assert len(rows) == 14
    assert all(row[2] == row[3] for row in rows)  # the client's request went upstream as it came
    assert any(row[5].startswith("shadow, would send ") for row in rows)
    refused = [row for row in rows if "FAILED" in row[5]]
    assert refused and all(number(row[2]) > 8_000 for row in refused)  # the upstream's own refusals, as without
    assert all(row[5].startswith("shadow, would send ") for row in refused)  # and what inflight would have sent
    assert any(line.startswith("shadow mode: every request went as the client sent it") for line in lines)


def test_serve_keeps_the_proxy_and_its_viewer_up_until_interrupted() -> None:
    command = [sys.executable, "-m", "inflight", "demo", "--serve", "--turns", TURNS, "--window", "6000"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        viewer = None
        printed = 0  # the compactions the table counts: none unless it says so
        while viewer is None:
            line = lines.get(timeout=120)  # a guard against a demo that hangs, not a measure
            found = re.search(r"The viewer: (http://127\.0\.0\.1:\d+)/inflight/ui", line)
            viewer = found.group(1) if found else None
            if said := re.match(r"(\d+) compactions? made \(the viewer's count\)", line):
                printed = int(said[1])
        with httpx.Client(base_url=viewer) as client:
            assert client.get("/inflight/ui").status_code == 200  # on loopback, without a key

            def archived() -> bool:
                conversations = client.get("/inflight/conversations").json()["conversations"]
                return any(c["label"] == "inflight-demo" and c["turn_count"] == int(TURNS) for c in conversations)

            wait_until(archived, timeout=60)
            [conversation] = client.get("/inflight/conversations").json()["conversations"]
            assert conversation["compaction_count"] == printed  # the table and the viewer count alike
            answer = client.post(
                "/v1/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
            )
            assert answer.status_code == 200 and answer.headers["x-inflight-actions"] == "none"
            assert "demo upstream" in answer.json()["choices"][0]["message"]["content"]
    finally:
        process.send_signal(signal.SIGINT)
        stderr = process.communicate(timeout=60)[1]
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr


def test_the_shipped_conversation_is_the_one_the_tests_replay() -> None:
    fixture = ROOT / "tests" / "fixtures" / "traces" / "swe_marshmallow_function_calling_replace.json"
    assert load_trace() == json.loads(fixture.read_text())


def test_readmes_demo_table_is_what_the_demo_prints() -> None:
    """README shows a run of `inflight demo`: its table, totals and counts, line for line (the two addresses, which
    are free ports, aside). A change to compaction that changes the figures changes README with it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = re.search(r"```text\n(inflight demo: .*?)```", readme, re.S)
    assert shown, "README shows no run of `inflight demo`"
    address = re.compile(r"http://127\.0\.0\.1:\d+")
    expected = [address.sub("ADDRESS", line.rstrip()) for line in shown[1].splitlines()]
    printed = [address.sub("ADDRESS", line.rstrip()) for line in demo()]
    assert printed[: len(expected)] == expected
