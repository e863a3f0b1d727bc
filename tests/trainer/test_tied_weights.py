"""trainer.tied_weights on the real XLA CPU device: a model moved there and back keeps each
parameter it shares one parameter; back on the host it holds the fetched state itself (no
second copy), its frozen parameters still frozen, the buffers the state dict leaves out
copied over."""

import os

import torch

os.environ.setdefault("PJRT_DEVICE", "CPU")

from trainer import tied_weights, xla  # noqa: E402
from trainer.checkpoints import to_cpu  # noqa: E402


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)
        self.body = torch.nn.Linear(4, 4)
        self.head = torch.nn.Linear(4, 8, bias=False)
        self.head.weight = self.embed.weight  # tied, as language models tie them
        self.body.bias.requires_grad_(False)  # frozen
        self.register_buffer("scale", torch.full((4,), 2.0))
        self.register_buffer("frequencies", torch.arange(4.0), persistent=False)


def test_a_model_moved_to_the_device_and_back_keeps_its_ties_and_holds_the_fetched_state():
    torch.manual_seed(0)
    source = Tied()
    before = source.embed.weight.detach().clone()
    model = tied_weights.to_device(source, xla.device())
    assert model.head.weight is model.embed.weight
    assert model.embed.weight.device.type == "xla"
    with torch.no_grad():
        model.embed.weight.add_(1.0)  # as training moves it, on the device
    state = to_cpu(model.state_dict(), xla.to_host)
    tied_weights.onto_host(model, state)
    assert {tensor.device.type for tensor in list(model.parameters()) + list(model.buffers())} \
        == {"cpu"}
    assert model.head.weight is model.embed.weight
    assert isinstance(model.embed.weight, torch.nn.Parameter)
    assert model.embed.weight.data_ptr() == state["embed.weight"].data_ptr()  # not copied
    assert model.scale is state["scale"]
    assert model.body.weight.requires_grad and not model.body.bias.requires_grad
    assert torch.equal(model.frequencies, torch.arange(4.0))  # not in the state: copied
    assert torch.equal(model.embed.weight.detach(), before + 1.0)  # what the device held
