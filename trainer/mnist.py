"""MNIST trainer (placeholder until the trainer issue lands): reports the XLA device it got."""

from __future__ import annotations

import sys


def main(argv: list) -> int:
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()
    print("trainer.mnist: device {} ({}), args {}".format(device, xm.xla_device_hw(device),
                                                          argv[1:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
