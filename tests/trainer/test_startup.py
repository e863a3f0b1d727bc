"""The trainers' start-up (``trainer.startup``, as ``trainer.mnist`` and ``trainer.imagenet``
use it): each entry imports the XLA runtime itself (not through one of its modules), importing
it maps no frame chunk per call of a loop, and the imports cost one full garbage collection,
not one every few hundred thousand objects. Each entry runs as a process that stops right after
its imports (exit 64: a platform's TF_CONFIG without a job dir, the run's first check; a bad
flag stops it before them), under strace where there is one."""

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
    argv = [sys.executable, "-X", "importtime", "-m", request.param, "--fake_data"]
    environ = clean_environ(TF_CONFIG="{}")
    environ.pop("PJRT_DEVICE", None)  # torch_xla picks the device (test_no_default_device_...)
    environ["PYTHONPATH"] = os.pathsep.join(
        [str(GC_STATS)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    options = dict(cwd=str(REPO), env=environ, capture_output=True, text=True, timeout=600)
    try:
        result, counts = syscalls.count(argv, only=("mmap",), **options)
        mmaps = counts.get("mmap", 0)
    except syscalls.StraceUnavailable:
        result, mmaps = subprocess.run(argv, **options), None
    assert result.returncode == 64 and "TF_CONFIG is set" in result.stderr, result.stderr[-2000:]
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


def test_no_default_device_warning_before_the_trainers_own_lines(started):
    """Without ``PJRT_DEVICE`` torch_xla's import picks a device and logs a bare
    ``WARNING:root:Defaulting to PJRT_DEVICE=CPU``; the trainer names its device itself."""
    _, result, _ = started
    assert "PJRT_DEVICE" not in result.stderr


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


# Each answers from its flags alone: --help, an unknown flag, or a value the config refuses.
FLAG_ANSWERS = [
    ("trainer.mnist", ["--help"], 0, "--num_epochs"),
    ("trainer.mnist", ["--num_epochs=-1"], 64, "--num_epochs must be positive"),
    ("trainer.imagenet", ["--no_such_flag"], 64, "no_such_flag"),
    ("trainer.imagenet", ["--fake_data", "--devices=two"], 64, "--devices must be auto"),
    ("trainer.data.plan", ["--help"], 0, "--host_cores"),
    ("trainer.data.plan", ["--hosts=0"], 64, "--hosts"),
    ("trainer.data.make_shards", ["--help"], 0, "--max_shorter_side"),
    ("trainer.data.make_shards", ["--source=a", "--dest=b", "--shard_size=0"], 64,
     "--shard_size=0 is not positive"),
]


def imported_modules(stderr: str) -> List[str]:
    return [name for _, name in import_tree(stderr)]


@pytest.mark.parametrize("module, args, code, text", FLAG_ANSWERS)
def test_the_flags_answer_before_any_framework_is_imported(module, args, code, text):
    """``--help`` and every flag check answer without importing torch (or torch_xla): a
    fraction of a second, not the seconds those imports take (bench/startup.py times it)."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", module] + args,
                            cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr[-2000:]
    assert text in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    frameworks = [name for name in imported_modules(result.stderr)
                  if name.split(".")[0] in ("torch", "torch_xla", "tensorflow")]
    assert not frameworks, "{} {} imported {}".format(module, args, frameworks[:3])


def test_a_scripts_bad_flag_stops_trainer_train_before_torch_xla(tmp_path):
    """``trainer.train``: the user's script imported torch already; its flags are checked
    before torch_xla is imported."""
    script = tmp_path / "script.py"
    script.write_text("import sys\nimport torch\nimport trainer\n"
                      "trainer.train(torch.nn.Linear(2, 2), [])\n")
    result = subprocess.run([sys.executable, "-X", "importtime", str(script), "--lr=-1"],
                            cwd=str(REPO), env=clean_environ(PJRT_DEVICE="CPU"),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 64, result.stderr[-2000:]
    assert "--lr must not be negative" in result.stderr and "Traceback" not in result.stderr
    assert "torch_xla" not in imported_modules(result.stderr)
