"""The layout's promises, checked on the source: layers that import only downwards, and no cycles.

Layers, from the top:
- the edge (`inflight.app`, `inflight.cli`, `inflight.demo`, `inflight.http`): HTTP and the command line; may use
  anything;
- the pipeline (`inflight.pipeline`): count, account, compact, send, learn; never the edge;
- the wire formats (`inflight.formats`) and the upstream transport (`inflight.upstream`): used by the
  pipeline and the edge; a format uses only the core, the transport only its settings and errors;
- the core (codecs, tokens, compaction, policy, records, archive, metrics, config, offload, errors):
  imports nothing above it, and no web stack.

Every import counts: module-level, function-local and under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "inflight"
WEB_STACK = {"starlette", "httpx", "httpcore", "uvicorn", "httptools"}

EDGE, PIPELINE, FORMATS, UPSTREAM, CORE = "edge", "pipeline", "formats", "upstream", "core"
LAYER_OF = {
    "inflight.app": EDGE,
    "inflight.cli": EDGE,
    "inflight.demo": EDGE,  # `inflight demo`: a proxy and a scripted upstream served here, and a client
    "inflight.__main__": EDGE,
    "inflight.http": EDGE,
    "inflight.pipeline": PIPELINE,
    "inflight.formats": FORMATS,
    "inflight.upstream": UPSTREAM,
    "inflight": CORE,  # __version__ only
    "inflight.archive": CORE,
    "inflight.codecs": CORE,
    "inflight.compaction": CORE,
    "inflight.config": CORE,
    "inflight.errors": CORE,
    "inflight.frozen": CORE,  # the read-only dataclass every layer uses
    "inflight.metrics": CORE,
    "inflight.offload": CORE,
    "inflight.policy": CORE,
    "inflight.records": CORE,
    "inflight.tokens": CORE,
    "inflight.viewer": CORE,
}
MAY_IMPORT = {
    EDGE: {EDGE, PIPELINE, FORMATS, UPSTREAM, CORE},
    PIPELINE: {PIPELINE, FORMATS, UPSTREAM, CORE},
    FORMATS: {FORMATS, CORE},
    UPSTREAM: {UPSTREAM, CORE},
    CORE: {CORE},
}
# The transport needs its settings, raises the proxy's errors and makes read-only dataclasses; nothing else of
# the core.
UPSTREAM_MAY_USE = ("inflight.upstream", "inflight.config", "inflight.errors", "inflight.frozen")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = modules()


def imports_of(name: str, path: Path) -> Iterator[str]:
    """Every inflight module `name` imports, wherever the import stands in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "inflight")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            if base.split(".")[0] != "inflight":
                continue
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in MODULES else base


GRAPH = {name: sorted(set(imports_of(name, path))) for name, path in MODULES.items()}


def layer_of(module: str) -> str:
    owner = max((prefix for prefix in LAYER_OF if module == prefix or module.startswith(prefix + ".")), key=len)
    return LAYER_OF[owner]


def test_every_module_has_a_layer() -> None:
    placed = [prefix for prefix in LAYER_OF if prefix != "inflight"]
    unplaced = [m for m in MODULES if m != "inflight" and not any(m == p or m.startswith(p + ".") for p in placed)]
    assert not unplaced, f"place these in LAYER_OF: {unplaced}"


def test_no_package_imports_upwards() -> None:
    upwards = [
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in GRAPH.items()
        for target in targets
        if layer_of(target) not in MAY_IMPORT[layer_of(module)]
    ]
    assert not upwards


def test_the_upstream_transport_uses_only_its_settings_and_errors() -> None:
    beyond = [
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if layer_of(module) == UPSTREAM
        for target in targets
        if not any(target == allowed or target.startswith(allowed + ".") for allowed in UPSTREAM_MAY_USE)
    ]
    assert not beyond


# The edge's modules that drive a turn; nothing else may import the driver.
DRIVES_TURNS = {"inflight.http.conversation_handler"}
# What a client may ask in its request's `x-inflight-*` headers: read where the request's options are made.
REQUEST_HEADERS = {"x-inflight-compaction", "x-inflight-session"}
# The demo is a client of the proxy: it reads the answer's headers as any client would.
CLIENTS = ("inflight.demo",)


def test_only_the_handlers_import_the_driver() -> None:
    importers = {module for module, targets in GRAPH.items() if "inflight.http.driver" in targets}
    assert importers <= DRIVES_TURNS


def header_reads(path: Path) -> Iterator[str]:
    """Every `x-inflight-*` name read in `path`: a subscript loaded, or an argument to `.get(...)`."""
    for node in ast.walk(ast.parse(path.read_text())):
        key: ast.expr | None = None
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            key = node.args[0] if node.args else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("x-inflight-"):
            yield f"{path.name}:{key.lineno} reads {key.value}"


def test_nothing_reads_the_proxys_own_headers_back() -> None:
    """What a turn did travels as its typed report; the headers are only rendered from it, never parsed."""
    reads = [
        read
        for module, path in MODULES.items()
        if not module.startswith(CLIENTS)
        for read in header_reads(path)
        if read.rpartition(" reads ")[2] not in REQUEST_HEADERS
    ]
    assert not reads


def test_no_import_cycles() -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in GRAPH.get(module, []):
            if state.get(target) == 1:
                cycles.append([*path[path.index(target) :], target])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in GRAPH:
        if module not in state:
            visit(module)
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def third_party_imports(path: Path) -> Iterator[str]:
    """The top-level names of every absolute import in the file, wherever it stands."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module.split(".")[0]


def test_no_web_stack_below_the_edge() -> None:
    """Only the edge serves HTTP (starlette, uvicorn); only the transport parses it (httptools); nothing
    in the proxy uses httpx, which reached the summarizer before there was one HTTP stack."""
    found = []
    for module, path in MODULES.items():
        layer = layer_of(module)
        allowed = {EDGE: {"starlette", "uvicorn", "httptools"}, UPSTREAM: {"httptools"}}.get(layer, set())
        found += [f"{module}: {name}" for name in third_party_imports(path) if name in WEB_STACK - allowed]
    assert not found


def test_the_pure_core_imports_no_web_stack() -> None:
    core = sorted(m for m in MODULES if layer_of(m) == CORE and m != "inflight.viewer")
    # A fresh interpreter: this test process has imported everything already.
    loaded = f"sorted(set({sorted(WEB_STACK)!r}) & set(sys.modules))"
    code = f"import sys; [__import__(m) for m in {core!r}]; print({loaded})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_handful_of_modules_at_the_top_and_an_init_with_the_version_only() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= 5, top
    init = ast.parse((PACKAGE / "__init__.py").read_text())
    assigned = [
        target.id
        for node in init.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    ]
    assert assigned == ["__version__"]
    imported = [node for node in init.body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert all(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in imported)


def test_the_package_is_inflight_and_proxy_is_gone() -> None:
    """`import inflight` works and `import proxy` does not: the old name must not linger as a second package."""
    assert importlib.util.find_spec("inflight") is not None
    assert importlib.util.find_spec("proxy") is None
    assert not (PACKAGE.parent / "proxy").exists()
