"""The RE2 scans of dropped text find what Python's `re` finds with the patterns they were written from.

The reference patterns below are the specification (the ones `inflight.compaction.facts` used before the
scans moved to RE2, for speed): on the real agents' outputs in `tests/fixtures/traces/` and on generated
text, both must agree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from inflight.compaction.conversation import text_of
from inflight.compaction.scan import error_lines, first_line, identifiers_in, paths_in

TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"

REFERENCE_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
REFERENCE_PATH = re.compile(
    r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]*\w\.\w{1,8}\b"
    r"|(?<![\w/.-])[\w-]+\.(?:py|pyi|js|jsx|ts|tsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|scala|sh|md|rst"
    r"|txt|json|ya?ml|toml|ini|cfg|lock|html|css|sql|xml|proto)\b"
)
REFERENCE_ERROR = re.compile(
    r"\b[A-Z]\w*(?:Error|Exception)\b|\bTraceback\b|\bFAILED\b|\bFAIL:|\bTIMED OUT\b|\btimed out\b"
    r"|\bfatal:|\bpanic(?:ked)?\b|Segmentation fault|\bcommand not found\b|No such file or directory"
    r"|\bPermission denied\b|\b(?i:exit (?:code|status))[: ]+[1-9]|<returncode>[1-9]|\bnpm ERR!|\berror [A-Z]+\d+"
    r"|\b[Ee]rror:|^\s*(?:ERROR|[Ee]rror|Wrong|Invalid|Cannot)\b|\b(?:cannot|can't|unable to)\b",
    re.MULTILINE,
)
REFERENCE_LISTING = re.compile(r"^\s*\d+\s*[:|]|^\s*(?:class|def|raise|except|import|from)\b|^\s*(?:#|//)")
REFERENCE_IDENTIFIER = re.compile(
    r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b|\b[a-z][a-z0-9]*_[a-z0-9_]+\b|\b[a-z]+[A-Z]\w*\b|\b[A-Z][a-z0-9]+[A-Z]\w*\b"
)


def reference_errors(text: str) -> list[str]:
    lines = text.splitlines()
    return [
        line.strip()[:200]
        for line in lines
        if line.strip() and REFERENCE_ERROR.search(line) and not REFERENCE_LISTING.match(line)
    ]


def reference_paths(text: str) -> list[str]:
    return REFERENCE_PATH.findall(REFERENCE_URL.sub(" ", text))


def trace_texts() -> list[str]:
    texts: list[str] = []
    for path in sorted(TRACES.glob("*.json")):
        body: dict[str, Any] = orjson.loads(path.read_bytes())
        texts += [text_of(message.get("content")) for message in body["messages"]]
    return [text for text in texts if text]


def test_the_agents_outputs_scan_as_python_re_scans_them() -> None:
    texts = trace_texts()
    assert len(texts) > 50
    found = {"errors": 0, "paths": 0, "names": 0}
    for text in texts:
        assert error_lines(text) == reference_errors(text)
        assert paths_in(text) == reference_paths(text)
        assert identifiers_in(text) == REFERENCE_IDENTIFIER.findall(text)
        found["errors"] += len(error_lines(text))
        found["paths"] += len(paths_in(text))
        found["names"] += len(identifiers_in(text))
    assert all(count > 5 for count in found.values()), found  # the traces exercise each scan


PIECES = st.sampled_from(
    [
        "src/app.py", "./a/b.json", "../x/y.tsx", "http://host/a/b.py", "see https://x.io/p.md.", "README.md",
        "ValueError", "Traceback", "FAILED", "Error:", "error E1234", "exit code 2", "Exit status: 1",
        "<returncode>3", "npm ERR!", "cannot", "can't", "unable to", "Permission denied", "ERROR", "Wrong", "  12: x",
        "def f():", "# cannot", "fields.TimeDelta", "snake_case_name", "camelCase", "PascalCase", "x", "42", " ",
        "\n", "\t", "/", ".", "-", "_", ":", "a.b", "a/b", "timed out", "panicked", "fatal:", "foo_bar.baz",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_generated_text_scans_as_python_re_scans_it(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert error_lines(text) == reference_errors(text)
    assert paths_in(text) == reference_paths(text)
    assert identifiers_in(text) == REFERENCE_IDENTIFIER.findall(text)


def test_the_first_line_with_something_on_it() -> None:
    assert first_line("\n  \n  hello world  \nnext") == "hello world"
    assert first_line("\n \n") == "(no output)"
    assert first_line("x" * 500) == "x" * 200
