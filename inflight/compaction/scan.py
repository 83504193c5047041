"""Scan text a compaction drops for its facts (error lines, paths, names) in time linear in its size.

The facts kept in a marker, a placeholder and the ledger come from everything an agent's tools
returned, and an agent can send 25 MB of it in one request. Python's `re` backtracks: the error
pattern costs about 50 µs a line, and the path pattern (a lookbehind, then a greedy run that backs up
to find its `/`) as much again, which is half a minute for 25 MB, more than everything else the proxy
does. RE2 (`google-re2`) runs each pattern once over the whole text as an automaton, at about
140 MB/s. Its dialect has no lookbehind and an ASCII-only `\\b`, so the patterns are written for it:
a word character is a Unicode letter, digit or `_` as in Python (`W`), "not preceded by" is written as
a consumed character (or the start), and an error is matched as the whole line containing it.
`tests/compaction/test_scan.py` checks the results against reference patterns written for Python's `re`.
"""

from __future__ import annotations

import re

import re2

W = r"[\pL\pN_]"  # a word character, as Python's `\w` on str
EXTENSIONS = (
    r"py|pyi|js|jsx|ts|tsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|scala|sh|md|rst"
    r"|txt|json|ya?ml|toml|ini|cfg|lock|html|css|sql|xml|proto"
)
URL = r"(?i:\b[a-z][a-z0-9+.-]*://\S+)"
# A path with a directory and an extension, or a file name with a known extension, not inside a longer word.
PATH = (
    rf"(?:^|[^\pL\pN_/.-])"
    rf"((?:\.{{0,2}}/)?(?:[\pL\pN_.-]+/)+[\pL\pN_.-]*{W}\.{W}{{1,8}}\b|[\pL\pN_-]+\.(?:{EXTENSIONS})\b)"
)
SPACE = r"[ \t\r\f\v]"  # whitespace within a line: RE2's `\s` would also match the newline
ERROR = (
    rf"\b[A-Z]{W}*(?:Error|Exception)\b|\bTraceback\b|\bFAILED\b|\bFAIL:|\bTIMED OUT\b|\btimed out\b"
    r"|\bfatal:|\bpanic(?:ked)?\b|Segmentation fault|\bcommand not found\b|No such file or directory"
    r"|\bPermission denied\b|\b(?i:exit (?:code|status))[: ]+[1-9]|<returncode>[1-9]|\bnpm ERR!|\berror [A-Z]+\d+"
    rf"|\b[Ee]rror:|^{SPACE}*(?:ERROR|[Ee]rror|Wrong|Invalid|Cannot)\b|\b(?:cannot|can't|unable to)\b"
)
IDENTIFIER = (
    rf"\b[A-Za-z_]{W}*(?:\.[A-Za-z_]{W}*)+\b"  # dotted: fields.TimeDelta, obj.attr
    r"|\b[a-z][a-z0-9]*_[a-z0-9_]+\b"  # snake_case
    rf"|\b[a-z]+[A-Z]{W}*\b|\b[A-Z][a-z0-9]+[A-Z]{W}*\b"  # camelCase, PascalCase
)


def _compiled(pattern: str) -> re2._Regexp[str]:
    options = re2.Options()
    options.max_mem = 64 << 20  # memory for these patterns' automata; beyond it RE2 falls back to slower matching
    return re2.compile(pattern, options)


ERROR_LINES = _compiled(rf"(?m)^[^\n]*?(?:{ERROR})[^\n]*")  # each whole line that contains an error
URLS = _compiled(URL)
PATHS = _compiled(PATH)
IDENTIFIERS = _compiled(IDENTIFIER)
# A numbered line of a file being shown (`1481:    raise ...`, `  12| x = 1`), or a line of code
# (`class ParseError(Exception):`, `# cannot be None`): source being read, not an error that happened.
# It is anchored, so `re` checks it quickly on the lines already found.
LISTING = re.compile(r"^\s*\d+\s*[:|]|^\s*(?:class|def|raise|except|import|from)\b|^\s*(?:#|//)")
MAX_LINE = 200


def error_lines(text: str) -> list[str]:
    """The lines of `text` that report an error (stripped, at most MAX_LINE characters), in order."""
    lines = (line.strip() for line in ERROR_LINES.findall(text) if not LISTING.match(line))
    return [line[:MAX_LINE] for line in lines if line]


def paths_in(text: str) -> list[str]:
    """The file paths `text` names, in order, leaving out those inside URLs (URLs are replaced by a space first)."""
    return PATHS.findall(URLS.sub(" ", text) if "://" in text else text)


def identifiers_in(text: str) -> list[str]:
    """Dotted, snake_case, camelCase and PascalCase names in `text`."""
    return IDENTIFIERS.findall(text)


def first_line(text: str) -> str:
    """The first non-blank line (at most MAX_LINE characters), found without splitting all of `text`."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        line = text[start:end].strip()
        if line:
            return line[:MAX_LINE]
        start = end + 1
    return "(no output)"
