"""What a background checkpoint write costs the host: serialising the state into a bytes
buffer and writing its value, against ``torch.save`` straight into the staged file
(``CheckpointStore.save`` through ``Directory.write_file``) (run: make bench, or python
bench/checkpoint_write.py [--repeats N]).

ResNet-18 and ResNet-50 (1,000 classes) with SGD momentum, their state in host memory as
``checkpoints.to_cpu`` leaves it, written to a local job dir (fsync included). Each way is
timed ``--repeats`` times, alternating; reported are the median seconds and the most the
process's resident memory grew above the state during one write (``VmHWM`` after resetting
it through ``/proc/self/clear_refs``, Linux only). The write runs on a thread of its own
during training, so both its CPU time and its memory are taken from the data workers.
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
import torchvision  # noqa: E402

from trainer.checkpoints import CheckpointStore  # noqa: E402
from trainer.storage import open_dir  # noqa: E402


def host_state(name: str):
    """A model's and its SGD optimizer's state (momentum buffers filled), in host memory."""
    model = getattr(torchvision.models, name)(num_classes=1000)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.nn.functional.cross_entropy(model(torch.randn(2, 3, 32, 32)),
                                      torch.tensor([1, 2])).backward()
    optimizer.step()
    return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError("no {} in /proc/self/status".format(field))


def measured(write) -> tuple:
    """(seconds, MB the resident memory peaked above where it started) of ``write()``."""
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the peak (VmHWM) starts again from the current size
    before = _status_kb("VmRSS")
    started = time.perf_counter()
    write()
    seconds = time.perf_counter() - started
    return seconds, (_status_kb("VmHWM") - before) / 1024


def compare(name: str, scratch: str, repeats: int) -> None:
    """Time both ways for the model ``name`` and print one line."""
    state = host_state(name)
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
    seconds = {way: statistics.median(s for s, _ in runs) for way, runs in results.items()}
    peak = {way: max(m for _, m in runs) for way, runs in results.items()}
    print("{}: {:.0f} MB checkpoint: buffered {:.0f} ms, +{:.0f} MB peak; streamed "
          "{:.0f} ms, +{:.0f} MB peak (time ratio {:.2f})".format(
              name, megabytes, 1e3 * seconds["buffered"], peak["buffered"],
              1e3 * seconds["streamed"], peak["streamed"],
              seconds["buffered"] / seconds["streamed"]), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name in ("resnet18", "resnet50"):
        with tempfile.TemporaryDirectory() as scratch:
            compare(name, scratch, args.repeats)


if __name__ == "__main__":
    main()
