"""The standard library's threading HTTP server, as Workbench's servers (the OTLP collector, the
fake provider) run it: a client that resets its connection (a killed process, a test hanging up
mid-request) ends that connection, not with a traceback on the user's terminal."""

from __future__ import annotations

import sys
from http.server import ThreadingHTTPServer


class QuietHTTPServer(ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections must not hold up shutdown

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)
