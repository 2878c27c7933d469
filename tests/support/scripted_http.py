"""A real HTTP server on 127.0.0.1 (http.server in a thread) whose answers a test scripts: the
price APIs' pages, a 429 before a page, a page that is not JSON, OpenCost's exposition text.
It records every request (path, query, time) so a test can check what was asked and when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from kubegan_trainer.launch.ports import reserve_port


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    at: float  # time.monotonic() when it arrived


# (path, query, how many requests came before this one) -> the answer
Responder = Callable[[str, dict[str, str], int], Answer]


@dataclass
class ScriptedServer:
    url: str
    requests: list[Request] = field(default_factory=list)


@contextmanager
def scripted_server(respond: Responder) -> Iterator[ScriptedServer]:
    state = ScriptedServer(url="")
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = dict(parse_qsl(parts.query, keep_blank_values=True))
            with lock:
                count = len(state.requests)
                state.requests.append(Request(parts.path, query, time.monotonic()))
            answer = respond(parts.path, query, count)
            self.send_response(answer.status)
            for key, value in answer.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the test's output stays the test's

    server = ThreadingHTTPServer(("127.0.0.1", reserve_port()), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
