"""A stand-in trainer: records what it was started with, then optionally waits for SIGTERM.

Writes one JSON line to ``$FAKE_TRAINER_OUT`` at start (argv, pid, selected env vars, and those
``$FAKE_TRAINER_WATCH`` names, comma-separated) and another when SIGTERM arrives. With
``FAKE_TRAINER_WAIT=1`` it sleeps until signalled.
Prints ``fake trainer started`` as its first line (the benchmark times it).
"""

import json
import os
import signal
import sys
import time

WATCHED = ("XRT_TPU_CONFIG", "TPU_IP_ADDRESS", "PJRT_DEVICE", "XRT_DEVICE_MAP", "XRT_WORKERS",
           "TPU_CONFIG", "LAUNCHER_TRAINER")


def watched():
    extra = os.environ.get("FAKE_TRAINER_WATCH", "")
    return WATCHED + tuple(name for name in extra.split(",") if name)


def record(entry):
    with open(os.environ["FAKE_TRAINER_OUT"], "a") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def on_sigterm(signum, frame):
    record({"event": "sigterm", "time": time.time()})
    sys.exit(0)


def main():
    signal.signal(signal.SIGTERM, on_sigterm)
    print("fake trainer started", flush=True)
    record({"event": "start", "argv": sys.argv[1:], "pid": os.getpid(),
            "ppid": os.getppid(), "time": time.time(),
            "env": {name: os.environ[name] for name in watched() if name in os.environ}})
    if os.environ.get("FAKE_TRAINER_WAIT"):
        deadline = time.time() + 60
        while time.time() < deadline:
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
