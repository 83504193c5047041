"""`inflight eval`: the traces replayed offline, with the figures the compaction goals are stated in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted(str(p) for p in (ROOT / "tests" / "fixtures" / "traces").glob("*.json"))


def run_eval(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "inflight", "eval", *TRACES, *args]
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)


def test_eval_reports_what_each_compaction_kept() -> None:
    result = run_eval("--window", "8000", "--json")  # the goals are stated at 8k and 16k
    assert result.returncode == 0, result.stderr
    totals = orjson.loads(result.stdout)
    assert totals["compacted_requests"] > 10
    assert totals["task_kept"] == 1.0 and totals["latest_request_kept"] == 1.0
    assert totals["paths_kept"] >= 0.95 and totals["commands_kept"] >= 0.9
    assert totals["wrong_placeholders"] == 0 and totals["summarizer_oversize"] == 0


def test_eval_prints_a_table_per_compaction() -> None:
    result = run_eval("--window", "6000")
    assert result.returncode == 0, result.stderr
    assert "| trace | turn | tokens | actions |" in result.stdout and "compacted requests: task kept" in result.stdout


def test_masked_results_are_scored_with_the_calls_they_answer() -> None:
    """A turn that only masks tool results drops no command (its calls are still sent): none is scored as an
    unnamed "tool call", and every command the masked results ran is found, by name, in what was sent."""
    for window in ("10000", "12000"):
        result = run_eval("--window", window, "--json")
        assert result.returncode == 0, result.stderr
        totals = orjson.loads(result.stdout)
        assert totals["commands_found"] > 0 and totals["commands_kept"] == 1.0, totals["missing"]
        assert "tool call" not in totals["missing"]["commands"]


def test_eval_reports_what_the_prompt_cache_could_serve() -> None:
    result = run_eval("--window", "8000", "--json")
    assert result.returncode == 0, result.stderr
    totals = orjson.loads(result.stdout)
    per_trace = totals["cache_per_trace"]
    assert set(per_trace) == {Path(path).stem for path in TRACES}
    assert totals["cache"]["turns"] == sum(t["turns"] for t in per_trace.values())
    assert 0 < totals["cache"]["rewrites"] < totals["cache"]["turns"]
    assert 0.5 < totals["cache"]["cached_share"] < 1
    table = run_eval("--window", "8000").stdout
    assert "| trace | turns | prefix rewrites | per 100 turns | cached share (estimated) | prompt cost" in table


def test_eval_measures_compaction_in_earnest_under_a_shadow_config(tmp_path: Path) -> None:
    """A config in shadow mode (to be tried on live traffic) is evaluated as what it would send."""
    shadow = tmp_path / "shadow.yaml"
    shadow.write_text("compaction: {mode: shadow}\n", encoding="utf-8")
    results = [run_eval("--window", "8000", "--json", *extra) for extra in ((), ("--config", str(shadow)))]
    assert all(result.returncode == 0 for result in results), [result.stderr for result in results]
    plain, shadowed = (orjson.loads(result.stdout) for result in results)
    assert shadowed["compacted_requests"] == plain["compacted_requests"] > 10
    assert shadowed["cache"] == plain["cache"]
