"""A test double of the vLLM engine's HTTP surface (models, tokenize, chat, MARS events and stats).

Records every chat request with its headers so tests can check what the oracle proxy forwarded.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeEngine:
    def __init__(self, model: str = "fake-model", fail_chat: bool = False, delay_s: float = 0.0,
                 max_model_len: int = 32768):
        self.model = model
        self.max_model_len = max_model_len
        self.fail_chat = fail_chat
        self.delay_s = delay_s
        self.chats: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        engine = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._reply(200, {"data": [{"id": engine.model}]})
                elif self.path == "/mars/v1/stats":
                    with engine.lock:
                        self._reply(200, {"events": len(engine.events), "chats": len(engine.chats)})
                elif self.path == "/health":
                    self._reply(200, {})
                else:
                    self._reply(404, {})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/tokenize":
                    text = body["prompt"] if "prompt" in body else json.dumps(body["messages"])
                    self._reply(200, {"count": max(1, len(text) // 4), "max_model_len": engine.max_model_len,
                                      "tokens": []})
                elif self.path == "/v1/chat/completions":
                    with engine.lock:
                        engine.chats.append((dict(self.headers), body))
                    time.sleep(engine.delay_s)
                    if engine.fail_chat:
                        self._reply(500, {"error": "boom"})
                        return
                    prompt = len(json.dumps(body["messages"])) // 4
                    self._reply(200, {"id": f"cmpl-{uuid.uuid4().hex}", "choices": [{"index": 0, "message": {
                        "role": "assistant", "content": "x" * body["max_tokens"]}, "finish_reason": "length"}],
                        "usage": {"prompt_tokens": prompt, "completion_tokens": body["max_tokens"],
                                  "total_tokens": prompt + body["max_tokens"],
                                  "prompt_tokens_details": {"cached_tokens": 0}}})
                elif self.path == "/mars/v1/events":
                    with engine.lock:
                        engine.events.extend(body["events"])
                    self._reply(200, {"accepted": len(body["events"])})
                else:
                    self._reply(404, {})

        return H


def main() -> None:
    """Serve a fake engine in its own process: prints its URL, runs until killed."""
    import sys

    engine = FakeEngine(delay_s=float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
    print(engine.url, flush=True)
    engine.thread.join()


if __name__ == "__main__":
    main()
