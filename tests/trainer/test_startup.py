"""The trainers' start-up (``trainer.startup``, as ``trainer.mnist`` and ``trainer.imagenet``
use it): each entry imports the XLA runtime itself (not through one of its modules), importing
it maps no frame chunk per call of a loop, and the imports cost one full garbage collection,
not one every few hundred thousand objects. Each entry runs as a process that a bad flag stops
right after its imports (exit 64), under strace where there is one."""

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest
import syscalls

from conftest import REPO, clean_environ

ENTRIES = ("trainer.mnist", "trainer.imagenet")
GC_STATS = Path(__file__).resolve().parent / "gc_stats"  # a sitecustomize: gc.DEBUG_STATS

# These imports make 7,000 to 9,000 mmap calls when healthy: about 700 for libraries and
# allocator arenas, the rest 16 KiB frame chunks opened where a loop's calls happen to cross a
# chunk edge, a few thousand in all. A loop that opens a chunk on every call adds its number
# of calls: torch's hipify tries, 133,000 (141,000 mmap calls in all at 7b9afc6). The bound
# leaves room for 11,000 more: about 0.08 s at the 7 us a chunk costs, under 1 % of the
# host-bound MNIST run that bench/startup.py times.
MAX_IMPORT_MMAPS = 20000


@pytest.fixture(scope="module", params=ENTRIES)
def started(request):
    """(entry module, its process, its mmap calls or None where strace cannot count), the
    process run with ``-X importtime`` and ``gc.DEBUG_STATS`` (the import tree and each
    collection on stderr; neither adds a Python frame to the imports' stack)."""
    argv = [sys.executable, "-X", "importtime", "-m", request.param, "--no_such_flag"]
    environ = clean_environ(PJRT_DEVICE="CPU")
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(GC_STATS)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    options = dict(cwd=str(REPO), env=environ, capture_output=True, text=True, timeout=600)
    try:
        result, counts = syscalls.count(argv, only=("mmap",), **options)
        mmaps = counts.get("mmap", 0)
    except syscalls.StraceUnavailable:
        result, mmaps = subprocess.run(argv, **options), None
    assert result.returncode == 64 and "no_such_flag" in result.stderr, result.stderr[-2000:]
    return request.param, result, mmaps


def import_tree(stderr: str) -> List[Tuple[int, str]]:
    """(nesting level, module) in the order ``-X importtime`` reports them: a module after
    the modules it imported, each level indented two more spaces (level 0: imported by the
    entry itself, or by runpy)."""
    tree = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1]
            if name.strip() != "imported package":
                tree.append(((len(name) - len(name.lstrip()) - 1) // 2, name.strip()))
    return tree


def test_the_entry_imports_the_runtime_itself(started):
    module, result, _ = started
    tree = import_tree(result.stderr)
    top = [name for level, name in tree if level == 0]
    # Imported by the entry itself, not by a module of its own that got there first.
    assert "trainer.xla" in top, "{} does not import trainer.xla itself".format(module)
    first = next(index for index, (_, name) in enumerate(tree) if name == "torch_xla")
    parent = next(name for level, name in tree[first:] if level < tree[first][0])
    assert (tree[first][0], parent) == (1, "trainer.xla")


def test_importing_the_entry_opens_no_frame_chunk_per_call(started):
    module, _, mmaps = started
    if mmaps is None:
        pytest.skip("no strace here to count system calls")
    assert mmaps <= MAX_IMPORT_MMAPS, (
        "importing {} made {} mmap calls (at most {}): a loop maps a frame chunk on each "
        "call; see trainer/startup.py, and find the loop with strace -f -tt -e trace=mmap against "
        "an import audit hook".format(module, mmaps, MAX_IMPORT_MMAPS))


def test_the_imports_cost_one_full_collection(started):
    module, result, _ = started
    full = result.stderr.count("gc: collecting generation 2")
    assert full == 1, "{} made {} full collections starting (one: trainer.startup)".format(
        module, full)
