"""A model server that dies under the e2e tests fails them with its exit status and the end of its log.

Run in the default suite (it needs no llama.cpp): a stand-in server that answers `/v1/models`, then, on its
first completion, dies of SIGILL, as a llama.cpp built for another CPU's instructions does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.e2e.agent import ServerDied, model_server, run_agent
from tests.support.servers import free_port

DIES_ON_COMPLETION = """
import os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"object": "list", "data": [{"id": "smollm2", "object": "model"}]}'
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        print("llama_model_loader: loaded; ggml_cpu: using AVX512 and AMX kernels", flush=True)
        os.kill(os.getpid(), signal.SIGILL)

print("listening", flush=True)
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_server_that_dies_fails_the_test_with_its_exit_status_and_log(tmp_path: Path) -> None:
    port = free_port()
    script = tmp_path / "dies.py"
    script.write_text(DIES_ON_COMPLETION)
    with (
        pytest.raises(ServerDied) as died,
        model_server([sys.executable, str(script), str(port)], port, tmp_path / "server.log") as server,
    ):
        run_agent(server.url, [("read_file", "a.py", "print(1)")], server=server)
    message = str(died.value)
    assert "signal SIGILL (exit code 132 in a shell)" in message
    assert "using AVX512 and AMX kernels" in message  # the last lines of its log
