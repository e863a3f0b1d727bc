"""--remat=block (trainer.parallel.remat): which modules are blocks in the models users bring
(the decoder, Hugging Face's and timm's layouts, a ResNet, a plain stack); training with the
blocks recomputed reaches the weights of training without, on both step paths; the backward
pass really runs each block again, behind an optimization barrier; blocks get their gradients
where their input needs none; what cannot be recomputed is one line."""

import logging

import pytest
import timm
import torch
import torchvision

from trainer import own_flags, own_loop, xla
from trainer.config import TrainConfig
from trainer.errors import TrainerError
from trainer.lm.decoder import Decoder, preset
from trainer.lm.flags import LmOptions
from trainer.lm.run import run
from trainer.outputs import OutputPaths
from trainer.parallel.remat import find_blocks, recompute_blocks

WIDTH = 32


class Layer(torch.nn.Module):
    """A Hugging Face decoder layer's calling convention: keyword arguments that may be
    None, a tuple out with a None in it."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, hidden, attention_mask=None, use_cache=False):
        out = hidden + torch.tanh(self.mlp(hidden))
        if attention_mask is not None:
            out = out * attention_mask.unsqueeze(-1)
        return out, None


class CausalLm(torch.nn.Module):
    """``model.layers`` inside ``model``, as LlamaForCausalLM nests them; the embedding frozen,
    so the first layer's input needs no gradient."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(50, WIDTH)
        self.model.embed_tokens.weight.requires_grad_(False)
        self.model.layers = torch.nn.ModuleList(Layer() for _ in range(3))
        self.lm_head = torch.nn.Linear(WIDTH, 50)

    def forward(self, input_ids, attention_mask):
        hidden = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            hidden, _ = layer(hidden, attention_mask=attention_mask)
        return self.lm_head(hidden)


class Vit(torch.nn.Module):
    """timm's layout: ``blocks`` an ``nn.Sequential``, beside a patch embedding and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.patch_embed = torch.nn.Linear(8, WIDTH)
        self.blocks = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(4)])
        self.head = torch.nn.Linear(WIDTH, 10)


class Normed(torch.nn.Module):
    """A residual block with batch norm: running statistics a forward pass updates."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = torch.nn.Linear(16, 16), torch.nn.BatchNorm1d(16)

    def forward(self, x):
        return x + torch.relu(self.norm(self.linear(x)))


def normed_net():
    """Two ``Normed`` blocks between two Linears: two of each class, the blocks the larger."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), Normed(), Normed(),
                               torch.nn.Linear(16, 3))


class TwoParts(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder, self.act, self.decoder = (torch.nn.Linear(4, 4), torch.nn.ReLU(),
                                                torch.nn.Linear(4, 4))


@pytest.mark.parametrize("model, names", [
    (Decoder(preset("tiny", 257, 16)), ["blocks.0", "blocks.1"]),
    (CausalLm(), ["model.layers.0", "model.layers.1", "model.layers.2"]),
    (Vit(), ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]),
    (torchvision.models.resnet18(), ["layer{}.{}".format(stage, i) for stage in range(1, 5)
                                     for i in range(2)]),
    (torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)),
     ["0", "2"]),
    (normed_net(), ["1", "2"]),
    (TwoParts(), ["encoder", "decoder"]),
], ids=["decoder", "hugging-face", "timm", "resnet", "sequential", "the-larger-class",
        "top-level"])
def test_the_blocks_are_the_repeated_stacks_elements_else_the_top_level_children(model, names):
    assert [name for name, _ in find_blocks(model)] == names


def gradients(model, remat, *inputs):
    """The gradients of a loss of ``model`` (moved to the XLA device) on ``inputs``."""
    dev = xla.device()
    model = model.to(dev)
    recompute_blocks(model, remat)
    loss = model(*[tensor.to(dev) for tensor in inputs]).float().square().mean()
    trained = [p for p in model.parameters() if p.requires_grad]
    return torch.autograd.grad(loss, trained)


def test_blocks_get_their_gradients_where_their_input_needs_none_and_the_backward_recomputes():
    """Against the same model without remat: equal gradients, the first layer's among them
    (its input, from a frozen embedding, needs none: torch's reentrant checkpoint gives that
    layer none). Each layer runs twice with gradients on (forward, then again in the
    backward pass), and the gradients' graph holds one optimization barrier per layer."""
    tokens = torch.randint(0, 50, (2, 5))
    mask = torch.ones(2, 5)
    expected = gradients(CausalLm(), "none", tokens, mask)
    model = CausalLm()
    calls, runs = [], []
    for layer in model.model.layers:
        layer.register_forward_hook(lambda module, args, output: calls.append(module))
        layer.mlp.register_forward_hook(lambda module, args, output: runs.append(module))
    found = gradients(model, "block", tokens, mask)
    assert (len(calls), len(runs)) == (3, 2 * 3)
    assert xla.graph_text(found).count(" opt-barrier(") == 3  # the instructions
    for name, want, got in zip([n for n, p in model.named_parameters() if p.requires_grad],
                               expected, found):
        assert torch.equal(want.cpu(), got.cpu()), name


def train(job, **flags):
    """trainer.lm's tiny decoder on random tokens, 24 SGD steps: its model.pt."""
    settings = dict(fake_data=True, batch_size=8, num_epochs=1, max_steps=24, lr=0.5,
                    lr_batch=0, optimizer="sgd", weight_decay=0.0, log_steps=0,
                    num_workers=0, job_dir=str(job), seed=1, model="")
    settings.update(flags)
    config = TrainConfig(**settings)
    summary = run(config, LmOptions(seq_len=16, preset="tiny"),
                  paths=OutputPaths.resolve(config.job_dir, {}))
    return summary, torch.load(str(job / "model.pt"), weights_only=False)


@pytest.mark.parametrize("step_mode, precision, sharding", [
    (xla.COMPILED, "fp32", "dp"), (xla.LAZY, "fp32", "dp"), (xla.COMPILED, "bf16", "dp"),
    pytest.param(xla.COMPILED, "fp32", "fsdp", marks=pytest.mark.spmd)])
def test_training_with_the_blocks_recomputed_reaches_the_same_weights(tmp_path, step_mode,
                                                                        precision, sharding,
                                                                        caplog):
    """Within 1e-6 of each tensor's movement: the recomputation is the same arithmetic on the
    same inputs (under bf16 autocast too, as the forward pass ran), which XLA may fuse
    otherwise in the backward pass, a few roundings of 2^-24 each, and SGD's update is
    linear in the gradient (measured: equal). On 4 devices under fsdp too (make test's SPMD
    session): each block recomputed from its split parameters."""
    flags = dict(step_mode=step_mode, precision=precision, sharding=sharding)
    _, expected = train(tmp_path / "none", **flags)
    with caplog.at_level(logging.INFO, logger="trainer"):
        summary, found = train(tmp_path / "block", remat="block", **flags)
    assert summary["remat"] == "block"
    assert "--remat=block: 2 blocks (Block, blocks.0 ... blocks.1) recompute" in caplog.text
    torch.manual_seed(1)  # the run's --seed, before it builds the model
    start = Decoder(preset("tiny", 257, 16)).state_dict()
    assert expected.keys() == found.keys()
    for name, weights in expected.items():
        moved = float((weights - start[name]).abs().max())
        assert moved > 0, name
        assert float((found[name] - weights).abs().max()) <= 1e-6 * moved, name


def vit():
    """timm's ViT as its users make one (2 blocks, 32-pixel images in 8-pixel patches)."""
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", pretrained=False, img_size=32,
                             patch_size=8, depth=2, num_classes=3)


def images(count, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 3, 32, 32, generator=generator)
    return torch.utils.data.TensorDataset(x, (x[:, 0].mean((1, 2)) > 0).long())


def vectors(count, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 8, generator=generator)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())


@pytest.mark.parametrize("make_model, data", [(vit, images), (normed_net, vectors)],
                         ids=["timm-vit", "batch-norm"])
def test_models_train_through_trainer_train_with_their_blocks_recomputed(tmp_path, make_model,
                                                                       data):
    """trainer.train's run (SGD, 8 steps, the compiled path) of timm's ViT, and of blocks with
    batch norm, whose running statistics the recomputation must not update a second time:
    --remat=block reaches the state of none (weights and statistics) within 1e-6 of its
    movement (the bound above)."""
    state = {}
    for remat in ("none", "block"):
        config = TrainConfig(data_dir=own_flags.DATA_FROM, batch_size=8, num_epochs=2, lr=0.05,
                             lr_batch=0, num_workers=0, log_steps=0, seed=1, remat=remat,
                             job_dir=str(tmp_path / remat))
        own_loop.run_own(config, OutputPaths.resolve(config.job_dir, {}), make_model(),
                         data(32, 0), data(8, 1), None)
        state[remat] = torch.load(str(tmp_path / remat / "model.pt"), weights_only=False)
    start = make_model().state_dict()
    for name, expected in state["none"].items():
        moved = float((expected.float() - start[name].float()).abs().max())
        assert moved > 0 or name.endswith("num_batches_tracked"), name
        found = state["block"][name].float()
        assert float((found - expected.float()).abs().max()) <= 1e-6 * moved, name


def test_what_cannot_be_recomputed_is_one_line():
    with pytest.raises(TrainerError, match="--remat='layer' is not one of none, block"):
        TrainConfig(data_dir="x", remat="layer")
    dropout = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(4, 4),
                                                        torch.nn.Dropout(0.1))
                                    for _ in range(2)])
    with pytest.raises(TrainerError) as raised:
        recompute_blocks(dropout, "block")
    assert raised.value.exit_code == 64
    assert raised.value.message == ("--remat=block would recompute 0 with Dropout 0.1 (p=0.1): "
                                    "the second forward pass would draw other masks")
    with pytest.raises(TrainerError, match="found no blocks in Linear"):
        recompute_blocks(torch.nn.Linear(4, 4), "block")
    # timm's stochastic depth draws its masks too (torchvision's StochasticDepth alike).
    drop_path = torch.nn.Sequential(*[timm.layers.DropPath(0.1) for _ in range(2)])
    for block in drop_path:
        block.register_parameter("scale", torch.nn.Parameter(torch.ones(1)))
    with pytest.raises(TrainerError, match=r"would recompute 0 with DropPath 0 \(p=0.1\)"):
        recompute_blocks(drop_path, "block")


class InPlace(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        x.mul_(2)  # changes the caller's tensor: saved changed, changed again if recomputed
        return self.linear(x)


def test_a_block_that_changes_its_input_in_place_is_one_line():
    model = torch.nn.Sequential(InPlace(), InPlace()).to(xla.device())
    recompute_blocks(model, "block")
    with pytest.raises(TrainerError, match="cannot recompute InPlace: it changes its input in "
                                           "place"):
        model(torch.randn(2, 4, device=xla.device()))


def test_a_recomputing_model_pickles_as_the_model_it_was_and_takes_remat_twice(tmp_path):
    """torch.save(model) after training (the blocks' classes swapped) loads without this
    project, as the model's own classes; a second run on the same model object recomputes
    once, as the first."""
    model = CausalLm()
    recompute_blocks(model, "block")
    recompute_blocks(model, "block")  # a second run in the same process
    tokens, mask = torch.randint(0, 50, (2, 5)), torch.ones(2, 5)
    with torch.no_grad():
        expected = model(tokens, mask)
    torch.save(model, str(tmp_path / "model.pt"))
    loaded = torch.load(str(tmp_path / "model.pt"), weights_only=False)
    assert [type(layer) for layer in loaded.model.layers] == [Layer] * 3
    with torch.no_grad():
        assert torch.equal(loaded(tokens, mask), expected)
    found = gradients(model, "block", tokens, mask)  # and it still trains
    assert len(found) == len([p for p in model.parameters() if p.requires_grad])
