"""How many batches torch_xla's device loader holds, in one place: ``xla.device_loader`` passes
them to it and ``trainer.data.plan`` counts them in a host's memory (without importing
torch_xla).

torch_xla's defaults (16 host batches queued, 8 per transfer) made its transfer thread collect
8 host batches before the first copy to the device: 813 ms before the first batch reached the
device at one host batch per 100 ms. One batch per transfer lets the first go as soon as it is
built; the data workers' own prefetch, not this queue, keeps the devices fed.
"""

# Host batches the loader's reading thread may queue ahead of the transfer thread.
LOADER_PREFETCH_BATCHES = 4
# Batches per host-to-device transfer, and the queue of batches already on the device.
DEVICE_PREFETCH_BATCHES = 1
# Decoded host batches the device loader may hold: its queue, the one being transferred and
# the one its reading thread waits to queue.
LOADER_HELD_BATCHES = LOADER_PREFETCH_BATCHES + DEVICE_PREFETCH_BATCHES + 1
