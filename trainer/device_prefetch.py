"""How many batches torch_xla's device loader holds, in one place: ``xla.device_loader`` passes
them to it and ``trainer.data.plan`` counts them in a host's memory (without importing
torch_xla).

torch_xla's defaults (16 host batches queued, 8 per transfer) made its transfer thread collect
8 host batches before the first copy to the device: 813 ms before the first batch reached the
device at one host batch per 100 ms. On the compiled path one batch per transfer lets the first
go as soon as it is built; the data workers' own prefetch, not this queue, keeps the devices
fed. On the lazy path a transfer per batch cost a host-bound run (MNIST on fake data, batch 8)
16 % of its steps/s against the defaults (``bench/run_timing.py``, paired): there every
transfer waits for the step being executed; 4 per transfer gave most of it back (the
first-batch wait is then 4 host batches, once per epoch, and the input stream has built them
ahead by then).
"""

# Host batches the loader's reading thread may queue ahead of the transfer thread.
LOADER_PREFETCH_BATCHES = 4
# Batches per host-to-device transfer, and the queue of batches already on the device, by the
# step path (``xla.COMPILED``, ``xla.LAZY``).
TRANSFER_BATCHES = {"compiled": 1, "lazy": 4}
# Decoded host batches the device loader may hold on either path: its queue, the ones being
# transferred and the one its reading thread waits to queue.
LOADER_HELD_BATCHES = LOADER_PREFETCH_BATCHES + max(TRANSFER_BATCHES.values()) + 1
