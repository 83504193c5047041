"""A scripted coding-agent loop on the official client, and the llama.cpp server it runs against.

The assistant's tool calls are scripted (a 135M model does not call tools reliably); its text,
the tool outputs (real files of this repository, real pytest output) and every model call are real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai

ROOT = Path(__file__).resolve().parents[2]
MODEL_ENV = "INFLIGHT_SMOLLM2_GGUF"
DEFAULT_MODEL = ROOT / ".cache" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 2048
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name, description in [("read_file", "Read a file of the repository"), ("run_tests", "Run pytest on a path")]
]
FILES = [
    "inflight/http/conversation_handler.py",
    "inflight/policy/windows.py",
    "inflight/tokens/counter.py",
    "inflight/policy/calibration.py",
    "inflight/policy/refusals.py",
    "inflight/config/settings.py",
    "inflight/http/relay.py",
    "inflight/compaction/compactor.py",
    "inflight/compaction/summary_job.py",
    "inflight/upstream/pool.py",
]
TEST_TARGETS = ["tests/config/test_settings.py", "tests/compaction/test_compactor.py"]
OUTPUT_CHARS = 3000


def model_path() -> Path:
    return Path(os.environ.get(MODEL_ENV, DEFAULT_MODEL))


LOG_TAIL_LINES = 20  # of a dead server's log, shown in the failure
DEATH_GRACE_S = 2.0  # after a failed turn, how long the server is given to be seen dead, if it is dying


class ServerDied(AssertionError):
    """The model server exited while a test used it (a SIGILL from a build for another CPU, an abort)."""


@dataclass
class ModelServer:
    """A model server process on loopback: its base URL, and its log, shown if it dies."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def check(self, *, grace_s: float = 0.0) -> None:
        """Raise `ServerDied`, with its exit status and the last lines of its log, if the process has exited (or
        does within `grace_s`: a connection dropped by a dying process breaks before the process is gone)."""
        try:
            code = self.process.wait(timeout=grace_s) if grace_s else self.process.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return
        how = f"exit code {code}"
        if code < 0:
            how = f"signal {signal.Signals(-code).name} (exit code {128 - code} in a shell)"
        lines = self.log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:] if self.log.exists() else []
        tail = "\n".join(f"    {line}" for line in lines) or "    (empty)"
        raise ServerDied(f"the model server died: {how}; the last lines of {self.log}:\n{tail}")


@contextmanager
def model_server(command: list[str], port: int, log: Path) -> Iterator[ModelServer]:
    """Run `command` (a server on 127.0.0.1:`port` with an OpenAI `/v1/models`) with its output in `log`,
    until it answers; fail with its exit status and log if it dies, then or later."""
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, cwd=ROOT)
        server = ModelServer(f"http://127.0.0.1:{port}/v1", process, log)
        try:
            wait_for_http(server)
            yield server
            server.check()  # it must still be running when the test is done with it
        finally:
            process.terminate()
            process.wait(timeout=30)


@contextmanager
def llama_server(port: int, log: Path) -> Iterator[ModelServer]:
    """llama-cpp-python's OpenAI-compatible server on SmolLM2-135M with a 2,048-token context."""
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path()),
        "--n_ctx",
        str(N_CTX),
        "--model_alias",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_threads",
        "2",
        # By default llama-cpp-python's server cuts a response short when another request arrives;
        # inflight's background summaries arrive while the agent's own turns stream.
        "--interrupt_requests",
        "False",
    ]
    with model_server(command, port, log) as server:
        yield server


def wait_for_http(server: ModelServer, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server.check()
        try:
            if httpx.get(server.url + "/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise TimeoutError(f"{server.url} did not answer within {timeout:g} s")


def tool_outputs() -> list[tuple[str, str, str]]:
    """(tool, path, output) for each turn: real files, and real pytest output from this checkout."""
    outputs: list[tuple[str, str, str]] = []
    for index, path in enumerate(FILES):
        outputs.append(("read_file", path, (ROOT / path).read_text()[:OUTPUT_CHARS]))
        if index % 2 == 1:
            target = TEST_TARGETS[(index // 2) % len(TEST_TARGETS)]
            result = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", target],
                capture_output=True,
                text=True,
                cwd=ROOT,
                timeout=300,
            )
            outputs.append(("run_tests", target, (result.stdout + result.stderr)[-OUTPUT_CHARS:]))
    return outputs


@dataclass
class Turn:
    number: int
    stream: bool
    ok: bool
    error: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None
    seconds: float = 0.0


def streamed_turn(number: int) -> bool:
    return number % 3 == 1


class AgentLoop:
    """One conversation: ask the model, record its reply and a scripted tool call, append the tool output."""

    def __init__(self, base_url: str) -> None:
        self.client = openai.OpenAI(base_url=base_url, api_key="sk-local", max_retries=0, timeout=600)
        self.messages: list[dict[str, Any]] = [
            {
                "role": "system",
                "content": "You are a careful coding agent. Use the tools to inspect and test the code.",
            },
            {
                "role": "user",
                "content": "The proxy's retry path sometimes loses the usage chunk. Find out why and fix it.",
            },
        ]

    def __enter__(self) -> AgentLoop:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()  # its keep-alive sockets would otherwise surface as ResourceWarnings at exit

    def step(self, number: int, tool: str, path: str, output: str) -> Turn:
        turn = Turn(number, streamed_turn(number), ok=False)
        started = time.perf_counter()
        text = ""
        try:
            text = ask(self.client, self.messages, turn)
            turn.ok = True
        except openai.APIStatusError as exc:
            turn.error = f"{exc.status_code} {getattr(exc, 'code', None)}"
        except EmptyStream:
            turn.error = "empty stream"
        except openai.APIConnectionError as exc:  # the server gone (or never there): the caller asks why
            turn.error = f"connection: {exc}"
        turn.seconds = time.perf_counter() - started
        call_id = f"call_{number}"
        call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": f'{{"path": "{path}"}}'}}
        self.messages.append({"role": "assistant", "content": text.strip() or "Let me look.", "tool_calls": [call]})
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        return turn


def run_agent(
    base_url: str,
    outputs: list[tuple[str, str, str]],
    *,
    server: ModelServer | None = None,
    stop_on_failure: bool = True,
) -> list[Turn]:
    """The agent's turns against `base_url`; a turn that fails while `server` has died fails with why it died."""
    turns: list[Turn] = []
    with AgentLoop(base_url) as loop:
        for number, (tool, path, output) in enumerate(outputs):
            turns.append(loop.step(number, tool, path, output))
            if not turns[-1].ok and server is not None:
                server.check(grace_s=DEATH_GRACE_S)
            if not turns[-1].ok and stop_on_failure:
                break
    return turns


class EmptyStream(Exception):
    """A 200 stream with no event: how llama-cpp-python refuses an overlong streaming request."""


def ask(client: openai.OpenAI, messages: list[dict[str, Any]], turn: Turn) -> str:
    common: dict[str, Any] = {"model": "smollm2", "messages": messages, "tools": TOOLS, "max_tokens": 24}
    if not turn.stream:
        raw = client.chat.completions.with_raw_response.create(**common, tool_choice="none")
        turn.headers = {k: v for k, v in raw.headers.items() if k.startswith("x-inflight")}
        completion = raw.parse()
        turn.prompt_tokens = completion.usage.prompt_tokens if completion.usage else None
        return completion.choices[0].message.content or ""
    with client.chat.completions.with_streaming_response.create(
        **common, tool_choice="none", stream=True, stream_options={"include_usage": True}
    ) as response:
        turn.headers = {k: v for k, v in response.headers.items() if k.startswith("x-inflight")}
        pieces = []
        events = 0
        for chunk in response.parse():
            events += 1
            if chunk.usage is not None:
                turn.prompt_tokens = chunk.usage.prompt_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    if events == 0:
        raise EmptyStream()
    return "".join(pieces)
