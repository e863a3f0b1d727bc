"""What a trainer's entry module (``trainer.mnist``, ``trainer.imagenet``) does around its
imports when it runs as the trainer process. The imports take seconds and leave some 440,000
Python objects that live as long as the process; two things about them cost start-up time.

**The garbage collector.** Left on, it scans that growing heap again and again while the
imports run (seven full collections, about 0.8 s here), and once more, whole, whenever enough
new objects have survived since: a full collection (0.2 to 0.3 s) that falls in the run or not
depending only on how many objects the code happens to allocate. So the entry calls
``pause_collector`` first (after catching SIGTERM) and ``freeze_imports`` after its imports:
one full collection, then everything loaded is frozen (``gc.freeze``), which later collections
never scan. (``gc.freeze`` also keeps the pages of a forked data worker shared with its parent:
the collector never writes to frozen objects.)

**Where torch_xla is imported.** The entry imports ``trainer.xla`` itself, right after torch
and before its other modules, so that torch_xla is imported at one fixed point of the call
stack, whatever the trainer's other modules import. That point matters on CPython 3.11 to
3.13.0: they keep the frames of Python calls in 16 KiB chunks and unmap a chunk as soon as the
call that opened it returns (python/cpython#142183, fixed upstream in 2026 with a one-chunk
cache), so a loop whose calls each open a new chunk maps and unmaps one per call (about 7 us a
call). Importing torch_xla runs torch's hipify module, which builds its CUDA-to-HIP tries with
133,000 calls; when ``trainer.devices`` became the first module to import ``trainer.xla``, two
more import frames put that loop on a chunk edge: 133,000 mmap/munmap pairs, about a second of
every start-up. The images' Pythons (3.7, 3.10) have no chunks. A fixed point is not a safe
one for good (a torch upgrade can put a loop on an edge again): ``tests/trainer/
test_startup.py`` checks the import point and bounds the imports' mmap calls, and
``bench/startup.py`` prints them.
"""

from __future__ import annotations

import gc


def pause_collector() -> None:
    """No garbage collection from now until ``freeze_imports``."""
    gc.disable()


def freeze_imports() -> None:
    """Collect the garbage the imports left, once; freeze what survives (no later collection
    scans it); collect as usual from now on."""
    gc.collect()
    gc.freeze()
    gc.enable()
