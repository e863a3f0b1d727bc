"""What a background checkpoint write costs the host: serialising the state into a bytes
buffer and writing its value, against ``torch.save`` straight into the staged file
(``CheckpointStore.save`` through ``Directory.write_file``) (run: make bench, or python
bench/checkpoint_write.py [--repeats N]).

ResNet-18 and ResNet-50 (1,000 classes) after two SGD steps with momentum on the XLA CPU
device (``checkpoint_copy.trained_state``), their state in host memory as
``checkpoints.to_cpu`` leaves it, written to a local job dir (fsync included). Each way is
timed ``--repeats`` times, alternating, in a ``BackgroundWriter`` as in the trainer; reported
are the median seconds, the most the process's resident memory grew above the state during
one write (``VmHWM`` after resetting it through ``/proc/self/clear_refs``, Linux only), and
the median time the calling thread (the training loop, in the trainer) could not run while
the write went on: its CPU time and memory are taken from the data workers, and while it
holds the GIL the loop cannot dispatch a step.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from checkpoint_copy import trained_state  # noqa: E402

from trainer import xla  # noqa: E402
from trainer.checkpoint_writer import BackgroundWriter  # noqa: E402
from trainer.checkpoints import CheckpointStore, to_cpu  # noqa: E402
from trainer.storage import open_dir  # noqa: E402

STALL = 0.005  # a 1 ms sleep that took longer than this was held up


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no {} in /proc/self/status".format(field))


def measured(write) -> tuple:
    """(seconds, MB the resident memory peaked above where it started, seconds the calling
    thread stalled) of ``write()`` handed to a ``BackgroundWriter``, as the trainer hands it
    (a thread of its own, niced), while this thread wakes every millisecond as a training loop
    would need to: a wake-up that comes more than ``STALL`` late was held up (by the GIL, or
    the CPU)."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak (VmHWM) starts again from the current size
    before = _status_kb("VmRSS")
    writer = BackgroundWriter(name="bench-writer")
    stalled = 0.0
    started = last = time.perf_counter()
    writer.submit(write, "bench checkpoint")
    while writer.busy():
        time.sleep(0.001)
        now = time.perf_counter()
        if now - last > STALL:
            stalled += now - last
        last = now
    writer.wait()  # a failed write is raised here
    seconds = time.perf_counter() - started
    return seconds, (_status_kb("VmHWM") - before) / 1024, stalled


def compare(name: str, scratch: str, repeats: int) -> None:
    """Time both ways for the model ``name`` and print one line."""
    # As ``checkpoints.to_cpu`` hands it to the writer (checkpoint_copy's trained state).
    state = to_cpu(trained_state(name), xla.to_host)
    directory = open_dir(scratch)
    store = CheckpointStore(directory, keep=1)

    def buffered() -> None:  # the way before: a buffer, then its value
        buffer = io.BytesIO()
        torch.save(state, buffer)
        directory.write_bytes("buffered.pt", buffer.getvalue())

    ways = {"buffered": buffered, "streamed": lambda: store.save(1, state)}
    results = {way: [] for way in ways}
    for _ in range(repeats):
        for way, write in ways.items():
            results[way].append(measured(write))
    megabytes = (Path(scratch) / "buffered.pt").stat().st_size / 1e6
    seconds, peak, stalled = ({way: statistic(run[field] for run in runs)
                               for way, runs in results.items()}
                              for field, statistic in ((0, statistics.median), (1, max),
                                                       (2, statistics.median)))
    print("{}: {:.0f} MB checkpoint".format(name, megabytes) + "".join(
        "; {} {:.0f} ms, +{:.0f} MB peak, caller stalled {:.0f} ms".format(
            way, 1e3 * seconds[way], peak[way], 1e3 * stalled[way]) for way in ways)
        + " (time ratio {:.2f})".format(seconds["buffered"] / seconds["streamed"]), flush=True)

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name in ("resnet18", "resnet50"):
        with tempfile.TemporaryDirectory() as scratch:
            compare(name, scratch, args.repeats)


if __name__ == "__main__":
    main()
