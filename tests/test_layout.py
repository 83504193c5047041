"""The layout's promises: a pure core that imports no web stack, and modules small enough to read."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PROXY = Path(__file__).resolve().parents[1] / "proxy"
WEB_STACK = {"starlette", "httpx", "httpcore", "uvicorn", "httptools"}


def test_the_pure_core_imports_no_web_stack() -> None:
    # A fresh interpreter: this test process has imported everything already.
    code = (
        "import sys, proxy.tokens, proxy.compaction, proxy.policy, proxy.pipeline.engine;"
        "import proxy.policy.windows, proxy.policy.calibration, proxy.policy.refusals, proxy.policy.retry;"
        f"print(sorted(set({sorted(WEB_STACK)!r}) & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_module_class_or_function_outgrows_what_a_reader_holds_in_mind() -> None:
    too_big = []
    for path in sorted(PROXY.rglob("*.py")):
        source = path.read_text()
        if source.count("\n") > 300:
            too_big.append(f"{path.name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > (150 if isinstance(node, ast.ClassDef) else 60):
                    too_big.append(f"{path.name}:{node.name}: {length} lines")
    assert not too_big
