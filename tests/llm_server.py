"""A loopback OpenAI-compatible chat server for rescue tests: real HTTP, scripted answers."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Script:
    """How the server answers the next requests."""

    answer: str = "0"
    delay: float = 0.0
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def chat_server(script: Script) -> Iterator[str]:
    """Serve ``/v1/chat/completions`` on 127.0.0.1; yields the ``api_base`` URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            script.requests.append(body)
            if script.delay:
                time.sleep(script.delay)
            if script.status != 200:
                payload = {"error": {"message": "scripted failure", "type": "server_error", "code": script.status}}
            else:
                payload = {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "test"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": script.answer},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 321, "completion_tokens": 2, "total_tokens": 323},
                }
            data = json.dumps(payload).encode()
            try:
                self.send_response(script.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """An api_base on a loopback port nothing listens on."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
