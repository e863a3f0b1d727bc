"""trainer.parallel.fsdp: which dimension of each parameter FSDP splits, and the model state
per device against the whole, computed from the shapes alone (ImageNet's ResNet-50 and a
language model's shapes, no device)."""

import pytest
import torch

from trainer.parallel.fsdp import MIN_SHARDED_ELEMENTS, ShardPlan, replicated_bytes, shard_dim


@pytest.mark.parametrize("shape, ways, dim", [
    ((4096, 1024), 8, 0),  # the largest divisible dimension
    ((1000, 2048), 8, 1),  # 1000 is divisible by 8 too, 2048 is larger
    ((1001, 2048), 8, 1),
    ((1001, 2049), 8, None),  # none divisible: whole
    ((256, 64, 3, 3), 4, 0),  # a convolution: its output channels
    ((2048,), 8, None),  # small: whole
    ((MIN_SHARDED_ELEMENTS,), 8, 0),
    ((4096, 4096), 1, None),  # one way: nothing to split
    ((512, 512), 512, 0),  # a tie: the first
])
def test_a_tensor_is_split_on_its_largest_divisible_dimension_when_large(shape, ways, dim):
    assert shard_dim(shape, ways) == dim


def test_the_state_per_device_counts_parameters_gradients_and_optimizer_slots():
    """A decoder's embedding (32000 x 1024) and a norm (1024): AdamW holds 2 slots, so
    16 bytes a trained float32 parameter; the embedding a quarter on each of 4, the norm
    whole; a frozen parameter has no gradient or slot."""
    embedding = torch.nn.Parameter(torch.empty(32000, 1024))
    norm = torch.nn.Parameter(torch.empty(1024))
    frozen = torch.nn.Parameter(torch.empty(1024, 1024), requires_grad=False)
    plan = ShardPlan([("embed", embedding), ("norm", norm), ("frozen", frozen)], 4, slots=2)
    assert plan.dims == {"embed": 0, "norm": None, "frozen": 0}
    per_device, whole = plan.state_bytes()
    assert whole == 16 * (32000 * 1024 + 1024) + 4 * 1024 * 1024
    assert per_device == 16 * (32000 * 1024 // 4 + 1024) + 4 * 1024 * 1024 // 4
    assert whole == replicated_bytes([embedding, norm, frozen], 2)
    assert plan.describe().startswith("model state 132 MB per device of 528 MB (1 of 3 "
                                      "parameters held whole")


@pytest.mark.parametrize("name, choice", [("350m", "dp"), ("1b", "fsdp"), ("7b", "fsdp")])
def test_at_the_size_users_run_the_plan_splits_what_a_chip_cannot_hold(name, choice):
    """The decoder presets at a 32,000-token vocabulary and 2,048 tokens, built on the meta
    device (shapes, no memory), under AdamW: --sharding=auto on a v5e (16 GB) keeps 350m
    whole (5.4 GB) and splits 1b (16.6 GB) and 7b (92.8 GB); split over a v5e-16 slice's 16
    chips and a v5e-256's 256, each chip holds a 16th and a 256th of the large tensors, plus
    the norms, which stay whole (a few MB)."""
    from trainer.chips import chip
    from trainer.lm.decoder import Decoder, preset
    from trainer.parallel.mesh import resolve

    with torch.device("meta"):
        model = Decoder(preset(name, 32000, 2048))
    whole = replicated_bytes(model.parameters(), 2)
    assert resolve("auto", whole, chip("TPU v5 lite").memory)[0] == choice
    norms = sum(16 * p.numel() for p in model.parameters() if p.dim() == 1)
    for ways in (16, 256):
        per_device, total = ShardPlan(model.named_parameters(), ways, slots=2).state_bytes()
        assert total == whole
        assert per_device == (whole - norms) // ways + norms
