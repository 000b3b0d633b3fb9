"""A local HTTP server speaking the Anthropic Messages and OpenAI Chat Completions wire protocols.

It answers from a script of `Reply`s (text + usage, or an error status) so tests can drive the real SDK
clients through `base_url`: `Anthropic(base_url=server.anthropic_url)`, `OpenAI(base_url=server.openai_url)`.
Requests containing a routed marker (e.g. "proposal slot 2") take that marker's replies, so concurrent agents
get their own scripts. Every request body is recorded. Runs on 127.0.0.1 on a random port, in a daemon thread.
"""
from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_ANTHROPIC_ERROR_TYPES = {429: "rate_limit_error", 500: "api_error", 529: "overloaded_error",
                          401: "authentication_error", 400: "invalid_request_error"}


@dataclass(frozen=True, slots=True)
class Reply:
    text: str = ""
    status: int = 200  # non-200: an error response in the protocol's error shape
    input_tokens: int = 1000
    output_tokens: int = 200
    truncated: bool = False  # stop_reason "max_tokens" / finish_reason "length"
    retry_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class Request:
    path: str
    body: dict


class ScriptedLLMServer:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.routes: dict[str, deque[Reply]] = {}
        self.requests: list[Request] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        # A short poll interval keeps shutdown (once per test) from costing half a second.
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_port}"

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_port}/v1"

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def route(self, marker: str, *replies: Reply) -> None:
        """Replies for the requests whose body contains `marker`, in order."""
        with self._lock:
            self.routes.setdefault(marker, deque()).extend(replies)

    def start(self) -> ScriptedLLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _next(self, request: Request) -> Reply:
        text = json.dumps(request.body)
        with self._lock:
            self.requests.append(request)
            script = next((q for marker, q in self.routes.items() if marker in text), self.script)
            if not script:
                return Reply(status=500, text="the test script has no reply left for this request")
            return script.popleft()

    def _anthropic(self, body: dict, reply: Reply) -> tuple[int, dict]:
        if reply.status != 200:
            kind = _ANTHROPIC_ERROR_TYPES.get(reply.status, "api_error")
            return reply.status, {"type": "error", "error": {"type": kind, "message": reply.text or kind}}
        return 200, {
            "id": f"msg_{next(self._ids)}", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": reply.text}],
            "stop_reason": "max_tokens" if reply.truncated else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }

    def _openai(self, body: dict, reply: Reply) -> tuple[int, dict]:
        if reply.status != 200:
            return reply.status, {"error": {"message": reply.text or f"HTTP {reply.status}",
                                            "type": "server_error", "param": None, "code": None}}
        return 200, {
            "id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": reply.text},
                         "finish_reason": "length" if reply.truncated else "stop", "logprobs": None}],
            "usage": {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                      "total_tokens": reply.input_tokens + reply.output_tokens},
        }


def _handler_for(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    routes = {"/v1/messages": server._anthropic, "/v1/chat/completions": server._openai}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
            route = routes.get(self.path)
            if route is None:
                self._send(404, {"error": {"message": f"no route {self.path}"}}, None)
                return
            reply = server._next(Request(self.path, body))
            status, payload = route(body, reply)
            self._send(status, payload, reply.retry_after_s)

        def _send(self, status: int, payload: dict, retry_after_s: float | None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            if retry_after_s is not None:
                self.send_header("retry-after", str(retry_after_s))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # keep pytest output clean; requests are recorded on the server

    return Handler
