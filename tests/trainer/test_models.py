"""trainer.models: what --model builds, and the input check before anything compiles, against
the real torchvision models and real forward passes on the host CPU (no torch_xla here)."""

import sys

import pytest
import torch
import torchvision

from trainer import models
from trainer.errors import TrainerError


def checked(name, batch, image_size, num_classes=10):
    """Build ``--model=name`` and run the check as the trainer does; returns the model."""
    make = models.builder(name)
    model = models.build_checked(name, make, num_classes, batch, image_size)
    models.check_input(name, model, make, num_classes, batch, image_size)
    return model


def runs_on_the_host(model, batch, image_size):
    try:
        with torch.no_grad():
            model.train()(torch.rand(batch, 3, image_size, image_size))
    except (RuntimeError, ValueError):
        return False
    return True


def test_the_list_of_the_pjrt_images_models_is_this_torchvisions():
    # The dev environment pins the pjrt image's torchvision (requirements/dev.in).
    assert torchvision.__version__.startswith(models.PJRT_TORCHVISION)
    assert list(models.TORCHVISION_MODELS) == sorted(
        torchvision.models.list_models(module=torchvision.models))


def test_a_vit_size_that_its_patch_does_not_divide_names_the_next_that_it_does():
    with pytest.raises(TrainerError) as refused:
        checked("vit_b_16", 2, 33)
    assert refused.value.exit_code == 64
    assert refused.value.message == (
        "--model=vit_b_16 cannot take --image_size=33: AssertionError: Input shape indivisible "
        "by patch size!")
    assert refused.value.hint == (
        "use --image_size=48 (the smallest size above it that the model takes)")


@pytest.mark.parametrize("name,image_size,smallest", [("inception_v3", 72, 75),
                                                      ("alexnet", 32, 63)])
def test_a_size_too_small_for_a_layer_names_the_smallest_that_the_model_takes(
        name, image_size, smallest):
    with pytest.raises(TrainerError) as refused:
        checked(name, 2, image_size)
    assert refused.value.message.startswith(
        "--model={} cannot take --image_size={}: RuntimeError: ".format(name, image_size))
    assert refused.value.hint == (
        "use --image_size={} (the smallest size above it that the model takes)".format(smallest))
    # The real forward pass agrees on both sides of the boundary.
    model = checked(name, 2, smallest)
    assert runs_on_the_host(model, 2, smallest)
    assert not runs_on_the_host(model, 2, smallest - 1)


def test_googlenet_trains_on_its_main_output_without_auxiliary_classifiers():
    model = checked("googlenet", 2, 32)
    assert not model.aux_logits
    assert model.train()(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_the_check_leaves_the_weights_buffers_and_random_state_as_they_were():
    torch.manual_seed(3)
    model = models.builder("resnet18")(10, 32)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    rng = torch.get_rng_state()
    models.check_input("resnet18", model, models.builder("resnet18"), 10, 4, 32)
    assert torch.equal(torch.get_rng_state(), rng)
    after = model.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)


def test_a_model_that_an_older_torchvision_lacks_names_the_image_that_has_it(monkeypatch):
    # torchvision 0.12 (the xrt image) has no list_models and no MaxViT.
    monkeypatch.delattr(torchvision.models, "list_models")
    monkeypatch.delattr(torchvision.models, "maxvit_t")
    monkeypatch.setattr(torchvision, "__version__", "0.12.0+cpu")
    assert "resnet50" in models.torchvision_names()
    with pytest.raises(TrainerError) as refused:
        models.builder("maxvit_t")
    assert refused.value.message == "--model=maxvit_t: torchvision 0.12.0 here has no such model"
    assert refused.value.hint == "the pjrt image (torch_xla 2.x, torchvision 0.24) has it"


USER_CODE = '''
import torch


def build(num_classes, image_size):
    return torch.nn.Sequential(torch.nn.Flatten(),
                               torch.nn.Linear(3 * image_size * image_size, num_classes))


def build_timm_style(num_classes, img_size=224):
    return build(num_classes, img_size)


def plain(num_classes):
    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(3, num_classes))


def not_a_module(num_classes):
    return "a model"


def raises(num_classes):
    raise RuntimeError("no weights here")


def wrong_logits(num_classes):
    return plain(num_classes + 1)


def wants_rgba(num_classes):
    return torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, num_classes))


class NoMetaValue(torch.nn.Module):
    def forward(self, x):
        scale = float(x.mean())  # a value the meta device has not: the host's forward decides
        return x[:, :1] * scale  # B x 1 x S x S, no logits


def no_meta_value(num_classes):
    return NoMetaValue()


NUMBER = 3
'''


@pytest.fixture
def user_package(tmp_path, monkeypatch):
    package = tmp_path / "user_nets"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(USER_CODE)
    (package / "broken.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_nets"
    for name in [name for name in sys.modules if name.startswith("user_nets")]:
        del sys.modules[name]


@pytest.mark.parametrize("function,keyword", [("build", "image_size"),
                                              ("build_timm_style", "img_size"),
                                              ("plain", None)])
def test_a_users_callable_gets_the_image_size_under_the_keyword_it_names(
        user_package, function, keyword):
    model = checked("user_nets.nets:" + function, 2, 8, num_classes=5)
    assert model(torch.rand(2, 3, 8, 8)).shape == (2, 5)
    assert models.builder("user_nets.nets:" + function).takes_size == (keyword is not None)


@pytest.mark.parametrize("value,message,hint", [
    ("user_nets.missing:build", "--model=user_nets.missing:build: module user_nets.missing "
     "does not import: ModuleNotFoundError: No module named 'user_nets.missing'", "PYTHONPATH"),
    ("user_nets.broken:build", "--model=user_nets.broken:build: module user_nets.broken does "
     "not import: ModuleNotFoundError: No module named 'no_such_dependency'", "PYTHONPATH"),
    ("user_nets.nets:nope", "--model=user_nets.nets:nope: user_nets.nets has no attribute nope",
     "name a function or class"),
    ("user_nets.nets:NUMBER", "--model=user_nets.nets:NUMBER: NUMBER is of type int, not a "
     "function or class", "the function or class"),
    ("user_nets.nets:", "--model=user_nets.nets: is not PACKAGE.MODULE:CALLABLE", "e.g."),
    ("user_nets.nets:not_a_module", "--model=user_nets.nets:not_a_module: not_a_module(...) "
     "returned a str, not a torch.nn.Module", "return the model"),
    ("user_nets.nets:raises", "--model=user_nets.nets:raises: raises(num_classes=10) failed: "
     "RuntimeError: no weights here", "called with num_classes"),
    ("user_nets.nets:wrong_logits", "--model=user_nets.nets:wrong_logits fails its first "
     "forward pass on 2 x 3 x 16 x 16 images: it returned a tensor of shape (2, 11), not 2 x "
     "10 logits", "logits B x 10"),
    ("user_nets.nets:wants_rgba", "--model=user_nets.nets:wants_rgba fails its first forward "
     "pass on 2 x 3 x 16 x 16 images: RuntimeError: ", "normalized float images"),
    ("timm.models:vit_small_patch16_224", "--model=timm.models:vit_small_patch16_224: module "
     "timm.models does not import: ModuleNotFoundError: ", "pjrt image"),
    ("resnet5", "--model=resnet5 is neither a torchvision classification model nor "
     "PACKAGE.MODULE:CALLABLE", "docs/trainers.md"),
])
def test_every_bad_model_is_one_usage_line_naming_the_flag(user_package, monkeypatch, value,
                                                            message, hint):
    if value.startswith("timm"):  # as in the xrt image, which has no timm (the dev env has)
        for module in ("timm", "timm.models"):  # None: import fails, even after an import
            monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(TrainerError) as refused:
        checked(value, 2, 16)
    assert refused.value.exit_code == 64
    assert refused.value.message.startswith(message), refused.value.message
    assert hint in refused.value.hint


def test_model_kwargs_reach_a_torchvision_constructor():
    """--model_kwargs (timm's --model-kwargs): ResNet's zero_init_residual zeroes the last
    BatchNorm of every block."""
    model = models.builder("resnet18", {"zero_init_residual": True})(10, 32)
    assert all(float(block.bn2.weight.abs().sum()) == 0 for block in model.layer1)
    assert float(models.builder("resnet18")(10, 32).layer1[0].bn2.weight.abs().sum()) > 0


def test_model_kwargs_reach_a_timm_builder():
    model = models.builder("timm.models:resnet10t", {"drop_path_rate": 0.1})(10, 32)
    rates = [module.drop_prob for module in model.modules() if hasattr(module, "drop_prob")]
    assert rates and max(rates) > 0


@pytest.mark.parametrize("name, extra, message", [
    ("resnet18", {"no_such_argument": 1}, "--model=resnet18 refused --model_kwargs="
     "{\"no_such_argument\": 1}: TypeError: "),
    ("user_nets.nets:plain", {"depth": 3}, "--model_kwargs: plain takes no keyword argument "
     "depth"),
    ("resnet18", {"num_classes": 5}, "--model_kwargs sets num_classes, which the trainer sets "
     "itself"),
    ("user_nets.nets:build", {"image_size": 5}, "--model_kwargs sets image_size"),
])
def test_model_kwargs_a_constructor_refuses_are_one_usage_line(user_package, name, extra,
                                                                message):
    with pytest.raises(TrainerError) as refused:
        models.builder(name, extra)(10, 16)
    assert refused.value.exit_code == 64
    assert refused.value.message.startswith(message), refused.value.message


def test_a_wrong_shape_found_on_the_host_names_the_batch_it_ran(user_package):
    """A global batch of 8 that the host's forward checks at 2: the line named both ("on 8 x
    3 x 16 x 16 images: ... not 2 x 10 logits")."""
    with pytest.raises(TrainerError) as refused:
        checked("user_nets.nets:no_meta_value", 8, 16)
    assert refused.value.message == (
        "--model=user_nets.nets:no_meta_value fails its first forward pass on 2 x 3 x 16 x 16 "
        "images: it returned a tensor of shape (2, 1, 16, 16), not 2 x 10 logits")
