"""trainer.batches: each host's examples of an epoch (``host_rows``), simulated at the size
users run without reading data: the windows of 10 B tokens of 2,048 (4.88 M) on 1 to 64
hosts of 8 chips, 4 windows a chip. The hosts' rows of every step, side by side, are the
step's global batch of the epoch's order, each window once; a resumed epoch gives the same
rows from its step on; and ``DatasetSource`` hands host 63 of 64 those rows."""

import pytest
import torch

from trainer.batches import HostPart, epoch_order, host_rows

WINDOWS = 10_000_000_000 // 2048  # 4,882,812


@pytest.fixture(scope="module")
def order():
    return epoch_order(WINDOWS, 7, 2)


@pytest.mark.parametrize("hosts", [1, 8, 64])
def test_the_hosts_rows_make_every_global_batch_of_the_epoch_once(order, hosts):
    batch = hosts * 8 * 4
    steps = WINDOWS // batch
    rows = [host_rows(order, batch, HostPart(host, hosts), 0, steps) for host in range(hosts)]
    assert all(part.shape == (steps, batch // hosts) for part in rows)
    assert torch.equal(torch.cat(rows, dim=1), order[:steps * batch].view(steps, batch))
    assert WINDOWS - steps * batch < batch  # only the ragged end is left out
    resumed = host_rows(order, batch, HostPart(hosts - 1, hosts), steps // 2, steps)
    assert torch.equal(resumed, rows[-1][steps // 2:])
    assert rows[-1]._base is None  # a copy: the epoch's whole order can go


def test_a_dataset_source_on_host_63_of_64_reads_its_rows_of_each_step(order):
    """Items that are their own index: host 63's first batches hold its rows of the order."""
    from trainer.dataset_source import DatasetSource

    class Numbers(torch.utils.data.Dataset):
        def __len__(self):
            return WINDOWS

        def __getitem__(self, index):
            return torch.tensor([index]), torch.tensor(index)

    batch = 64 * 8 * 4
    source = DatasetSource(Numbers(), None, batch, batch, seed=7, host=HostPart(63, 64))
    try:
        batches = source.train_batches(2, start_step=5)
        expected = host_rows(order, batch, HostPart(63, 64), 5, 7)
        for row in expected:
            x, y = next(batches)
            assert x.flatten().tolist() == row.tolist() == y.tolist()
    finally:
        source.close()
