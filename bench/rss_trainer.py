"""A minimal XLA trainer step for the launcher benchmark: imports torch_xla, runs one step on
the XLA device, and prints its own peak RSS (VmHWM is per address space, so it starts afresh
at exec: it shows exactly what the launcher left behind, if anything)."""

import os
import sys


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def main() -> int:
    print("trainer started", flush=True)
    # The benchmark resolves an emulated TPU node, then measures this step on the CPU device.
    os.environ["PJRT_DEVICE"] = "CPU"
    import torch
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()
    model = torch.nn.Linear(784, 10).to(device)
    loss = model(torch.randn(128, 784, device=device)).sum()
    loss.backward()
    xm.mark_step()
    print("peak_rss_kib {}".format(peak_rss_kib()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
