"""The service of an httpdiag task (this file is the task's `app.py`, with REPORT_MS filled in):
a small JSON API configured by config.json.

Usage: python3 app.py [PORT]   (0 or nothing: a free port, printed as `listening on PORT`)
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REPORT_MS = 300  # how long building a report takes here (filled in)


def handler(config: dict) -> type[BaseHTTPRequestHandler]:
    prefix = config["api_prefix"]

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authorised(self) -> bool:
            if self.headers.get(config["auth_header"]) != config["api_key"]:
                self.log_error("401 missing or wrong header %s", config["auth_header"])
                self.reply(401, {"error": "unauthorised"})
                return False
            return True

        def do_GET(self) -> None:
            if not self.path.startswith(prefix + "/"):
                self.reply(404, {"error": "no such route"})
            elif not self.authorised():
                return
            elif self.path.startswith(prefix + "/items/"):
                item = self.path.removeprefix(prefix + "/items/")
                self.reply(200, {"id": item, "name": f"item-{item}"})
            elif self.path == prefix + "/report":
                if config["handler_timeout_ms"] < REPORT_MS:
                    self.log_error(
                        "504 handler /report took %d ms > %d ms", REPORT_MS, config["handler_timeout_ms"]
                    )
                    self.reply(504, {"error": "timeout"})
                else:
                    time.sleep(REPORT_MS / 1000)
                    self.reply(200, {"report": "ok"})
            else:
                self.reply(404, {"error": "no such route"})

        def do_POST(self) -> None:
            if self.path != prefix + "/echo":
                self.reply(404, {"error": "no such route"})
                return
            if not self.authorised():
                return
            size = int(self.headers.get("Content-Length") or 0)
            if size > config["max_body_bytes"]:
                self.log_error("413 body of %d bytes > max_body_bytes %d", size, config["max_body_bytes"])
                self.reply(413, {"error": "body too large"})
                return
            self.reply(200, {"received": len(self.rfile.read(size))})

    return Handler


def serve(config: dict, port: int = 0) -> ThreadingHTTPServer:
    return ThreadingHTTPServer(("127.0.0.1", port), handler(config))


if __name__ == "__main__":
    with open("config.json", encoding="utf-8") as f:
        server = serve(json.load(f), int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()
