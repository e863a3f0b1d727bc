"""trainer.data.workers: the default worker count uses every core the process may use but the
trainer's (no ceiling: a v6e host's 180 vCPUs get 179 workers), fewer only where memory
requires it (the cores and memory: tests/trainer/test_host_resources.py)."""

import logging

import pytest

from trainer.data import jpeg_limits, plan, workers
from trainer.data.workers import choose
from trainer.host_resources import Host, this_host

GB = 10 ** 9


def shape(chips: int) -> plan.SliceShape:
    """One host of ``chips`` chips, the trainer's default batch (128 per chip) at 224 px."""
    return plan.shape_from_flags(1, chips, 128, 0, 1, 224)


@pytest.mark.parametrize("cores, memory_gb, chips", [
    (16, 128, 1),  # the lent H100 machine
    (112, 192, 4),  # a v5e host of 4 chips
    (180, 720, 8),  # a v6e host of 8 chips
    (224, 384, 8),  # a v5e host of 8 chips
])
def test_every_core_but_the_trainers_decodes_where_memory_holds_them(cores, memory_gb, chips):
    need = plan.data_memory(shape(chips), plan.IMAGENET_EXAMPLE_BYTES)
    choice = choose(Host(cores, memory_gb * GB), need)
    assert choice.workers == cores - 1 and not choice.memory_bound
    assert choice.total <= memory_gb * GB
    assert "data workers: {} (one per core but the trainer's".format(cores - 1) in choice.line()


def test_small_memory_limits_the_workers_to_what_it_holds():
    need = fixed, per_worker = plan.data_memory(shape(8), plan.IMAGENET_EXAMPLE_BYTES)
    choice = choose(Host(224, 32 * GB), need)
    # Each worker: its process, an image at the decode budget and RUNS_AHEAD + 1 runs of up to
    # BLOCK_EXAMPLES + 1 examples more; fixed: the trainer, the step ring of 24 local batches
    # and 3 batches of runs.
    assert per_worker == (plan.WORKER_PROCESS_BYTES + jpeg_limits.DECODE_BUDGET
                          + 3 * 33 * plan.IMAGENET_EXAMPLE_BYTES)
    assert fixed == (plan.TRAINER_PROCESS_BYTES + 24 * 1024 * (3 * 224 * 224 + 8)
                     + 3 * 1024 * plan.IMAGENET_EXAMPLE_BYTES)
    assert choice.workers == (32 * GB - fixed) // per_worker == 29
    assert choice.memory_bound and choice.total <= 32 * GB < choice.total + per_worker
    assert "data workers: 29 (memory holds only 29" in choice.line()
    # Too little for even one: still one (the /dev/shm check and the line say the rest).
    assert choose(Host(16, 4 * GB), need).workers == 1
    # Memory unknown: not limited by it.
    assert choose(Host(224, 0), need).workers == 223


def test_a_host_of_one_core_still_gets_one_worker():
    assert choose(Host(1, 0), (0, 0)).workers == 1
    assert workers.auto_workers(180) == 179


def test_the_start_up_line_says_the_choice(caplog, monkeypatch):
    # configure_logging (plan.main in this process) may have cleared it
    monkeypatch.setattr(logging.getLogger("trainer"), "propagate", True)
    with caplog.at_level(logging.INFO, logger="trainer"):
        count = workers.resolve_workers(-1, shape(1))
    assert count == choose(this_host(), plan.data_memory(
        shape(1), plan.IMAGENET_EXAMPLE_BYTES)).workers
    assert any(record.getMessage().startswith("data workers: {} (".format(count))
               for record in caplog.records)
    assert workers.resolve_workers(3) == 3 and workers.resolve_workers(0) == 0


def test_the_advice_learns_how_many_workers_memory_holds_only_where_it_is_the_limit():
    # 16 cores and room for 4 workers: memory decides (the advice must not ask for 15);
    # room for thousands: the cores decide, and memory is no limit to report.
    fixed, per_worker = GB, GB // 2
    tight = choose(Host(16, fixed + 4 * per_worker + 1), (fixed, per_worker))
    assert (tight.workers, tight.memory_holds) == (4, 4)
    roomy = choose(Host(16, 1000 * GB), (fixed, per_worker))
    assert (roomy.workers, roomy.memory_holds) == (15, None)
    assert choose(Host(16, 0), (fixed, per_worker)).memory_holds is None  # unknown
