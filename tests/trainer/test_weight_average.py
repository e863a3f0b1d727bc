"""trainer.weight_average: --ema_decay's average of the weights, its rule in place and in a
graph alike, the model seen with the averages and given its own weights back, and the
averages through a checkpoint's state dict."""

import torch

from trainer.weight_average import WeightAverage


def model():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                              torch.nn.Linear(4, 2)).double()
    net[0].bias.requires_grad_(False)  # frozen: no average
    return net


def test_the_average_follows_the_rule_in_place_and_as_new_tensors():
    """average + (weight - average) * (1 - D) after each step, the in-place update (lazy
    path) and the functional one (the compiled graph) alike; a frozen parameter has none."""
    net = model()
    average = WeightAverage(net, 0.9)
    assert "0.bias" not in average.names and len(average.names) == 5
    expected = [p.detach().clone() for p in average.parameters]
    functional = [p.detach().clone() for p in average.parameters]
    for step in range(3):
        with torch.no_grad():
            for parameter in average.parameters:
                parameter.add_(0.1 * (step + 1))
        average.update()
        functional = average.updated(functional, [p.detach() for p in average.parameters])
        expected = [e * 0.9 + p.detach() * 0.1 for e, p in zip(expected, average.parameters)]
    for mine, theirs, graph in zip(average.averages, expected, functional):
        assert torch.allclose(mine, theirs, rtol=1e-14, atol=0)
        assert torch.equal(mine, graph)


def test_swapped_shows_the_averages_and_gives_the_weights_back():
    net = model()
    average = WeightAverage(net, 0.5)
    own = {name: p.detach().clone() for name, p in net.named_parameters()}
    average.averages = [torch.full_like(p, 7.0) for p in average.parameters]
    with average.swapped():
        assert all(float(p.detach().flatten()[0]) == 7.0 for p in average.parameters)
        assert torch.equal(net[0].bias, own["0.bias"])  # frozen: its own
    for name, parameter in net.named_parameters():
        assert torch.equal(parameter.detach(), own[name])
        assert parameter.requires_grad == (name != "0.bias")


def test_a_checkpoints_averages_load_by_name_and_a_missing_one_starts_from_its_weight():
    net = model()
    saved = {name: torch.full_like(value, 3.0)
             for name, value in WeightAverage(net, 0.5).state_dict().items()}
    del saved["2.weight"]  # unfrozen since that checkpoint
    average = WeightAverage(net, 0.5)
    with torch.no_grad():
        net[2].weight.add_(1.0)
    average.load_state_dict(saved)
    state = average.state_dict()
    assert torch.equal(state["0.weight"], torch.full_like(state["0.weight"], 3.0))
    assert torch.equal(state["2.weight"], net[2].weight.detach())
