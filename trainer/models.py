"""The ImageNet trainer's ``--model``: which model a name builds, and whether that model takes the
run's images, checked before anything compiles.

A ``--model`` value is either

- a torchvision classification model (``torchvision.models.list_models``), built with the
  run's class count and, where its constructor takes one, the image size (ViT ``image_size``,
  MaxViT ``input_size``); GoogLeNet and Inception v3 without their auxiliary outputs, so that
  every model returns one tensor of logits in training as in evaluation; or
- ``PACKAGE.MODULE:CALLABLE``: code of the user's own, importable in the process (timm's models
  the same way: ``timm.models:vit_small_patch16_224``), called as
  ``CALLABLE(num_classes=N)`` plus ``image_size=S`` or ``img_size=S`` where its signature names
  one (timm's builders take ``**kwargs``: they are given ``img_size`` where the model accepts
  it). It returns a ``torch.nn.Module`` that takes normalized float images ``B x 3 x S x S``
  and returns logits ``B x N``.

Every failure is a ``TrainerError`` naming the flag to change (exit 64): an unknown name, a
module that does not import, a missing name, a return that is not a Module, and a model that
cannot take a global batch of ``--batch_size`` images of ``--image_size`` in training (a ViT
image size that is no multiple of its patch, Inception v3 under 75 px, MaxViT partitions that
do not divide, BatchNorm layers left one value per channel). That check runs the model's
forward pass once on the ``meta`` device (shapes only, torch 2.x), else on the host CPU at a
batch of at most 2 (which decides the BatchNorm question exactly as the whole batch would).
"""

from __future__ import annotations

import copy
import importlib
import inspect
import json
from typing import Any, Callable, Dict, Iterable, Optional, Tuple

import torch

from trainer.errors import EX_USAGE, TrainerError

# torchvision's classification models in the pjrt image (torchvision 0.24,
# ``list_models(module=torchvision.models)``): a name here that an older torchvision lacks (the
# xrt image's 0.12) is refused with a line naming the image that has it.
PJRT_TORCHVISION = "0.24"
TORCHVISION_MODELS = (
    "alexnet", "convnext_base", "convnext_large", "convnext_small", "convnext_tiny",
    "densenet121", "densenet161", "densenet169", "densenet201", "efficientnet_b0",
    "efficientnet_b1", "efficientnet_b2", "efficientnet_b3", "efficientnet_b4",
    "efficientnet_b5", "efficientnet_b6", "efficientnet_b7", "efficientnet_v2_l",
    "efficientnet_v2_m", "efficientnet_v2_s", "googlenet", "inception_v3", "maxvit_t",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3", "mobilenet_v2",
    "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_16gf", "regnet_x_1_6gf",
    "regnet_x_32gf", "regnet_x_3_2gf", "regnet_x_400mf", "regnet_x_800mf", "regnet_x_8gf",
    "regnet_y_128gf", "regnet_y_16gf", "regnet_y_1_6gf", "regnet_y_32gf", "regnet_y_3_2gf",
    "regnet_y_400mf", "regnet_y_800mf", "regnet_y_8gf", "resnet101", "resnet152", "resnet18",
    "resnet34", "resnet50", "resnext101_32x8d", "resnext101_64x4d", "resnext50_32x4d",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1", "swin_b", "swin_s", "swin_t", "swin_v2_b", "swin_v2_s",
    "swin_v2_t", "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19",
    "vgg19_bn", "vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32",
    "wide_resnet101_2", "wide_resnet50_2")
# Auxiliary classifiers return a tuple in training; without them the model returns its logits.
# init_weights=True is the initialization they had (the default's FutureWarning aside).
WITHOUT_AUX = {"googlenet": dict(aux_logits=False, init_weights=True),
               "inception_v3": dict(aux_logits=False, init_weights=True)}
# The keywords a user's callable may take the image size under, in the order tried.
SIZE_KEYWORDS = ("image_size", "img_size")
# How far above --image_size the check looks for a size the model takes (the hint): MaxViT's
# partitions need a multiple of 224 (7 x 32), so from 1 px that is 223 sizes up.
SIZE_SEARCH = 256
BATCH_NORM_CAUSE = "more than 1 value per channel"



class Builder:
    """What ``--model`` names: called ``(num_classes, image_size)``, it builds the model;
    ``takes_size``: whether the image size goes into the model (so that another size needs
    another model)."""

    def __init__(self, make: Callable[[int, int], torch.nn.Module], takes_size: bool) -> None:
        self.make = make
        self.takes_size = takes_size

    def __call__(self, num_classes: int, image_size: int) -> torch.nn.Module:
        return self.make(num_classes, image_size)


def torchvision_names() -> Iterable[str]:
    """The classification models this process's torchvision has."""
    import torchvision

    if hasattr(torchvision.models, "list_models"):  # torchvision 0.14 and later
        return torchvision.models.list_models(module=torchvision.models)
    return [name for name in TORCHVISION_MODELS if callable(getattr(torchvision.models, name,
                                                                    None))]


def builder(name: str, extra: Optional[Dict[str, Any]] = None) -> Builder:
    """The ``Builder`` (``(num_classes, image_size) -> Module``) that ``--model=name`` names,
    passing ``extra`` keyword arguments (``--model_kwargs``) to its constructor or callable;
    a ``TrainerError`` for a name that builds nothing here, or ``extra`` that it refuses."""
    extra = dict(extra or {})
    taken = sorted(set(extra) & ({"num_classes"} | set(SIZE_KEYWORDS)))
    if taken:
        raise TrainerError("--model_kwargs sets {}, which the trainer sets itself".format(
            taken[0]), "leave it out: num_classes comes from the data, the image size from "
            "--image_size", EX_USAGE)
    if ":" in name:
        return _user_builder(name, extra)
    import torchvision

    if name in torchvision_names():
        return _torchvision_builder(name, extra)
    if name in TORCHVISION_MODELS:
        raise TrainerError(
            "--model={}: torchvision {} here has no such model".format(
                name, torchvision.__version__.split("+")[0]),
            "the pjrt image (torch_xla 2.x, torchvision {}) has it".format(PJRT_TORCHVISION))
    raise TrainerError(
        "--model={} is neither a torchvision classification model nor PACKAGE.MODULE:CALLABLE"
        .format(name), "e.g. --model=resnet50, --model=vit_b_16 or --model=my_models.nets:build "
        "(docs/trainers.md lists the models)")


def _torchvision_builder(name: str, extra: Dict[str, Any]) -> Builder:
    import torchvision

    make = getattr(torchvision.models, name)

    def build_torchvision(num_classes: int, image_size: int) -> torch.nn.Module:
        kwargs = dict(WITHOUT_AUX.get(name, {}), num_classes=num_classes, **extra)
        if name.startswith("vit_"):
            kwargs["image_size"] = image_size
        elif name.startswith("maxvit_"):
            kwargs["input_size"] = (image_size, image_size)
        try:
            return make(**kwargs)
        except TypeError as error:  # torchvision passes them on to the model's class
            raise refused_keywords(name, extra, error)
        except (AssertionError, ValueError, RuntimeError) as error:
            # ViT: "Input shape indivisible by patch size!"; MaxViT: a partition that does
            # not divide its block's input.
            raise ModelRefused(cause(error), TrainerError(
                "--model={} cannot be built for --image_size={}: {}".format(
                    name, image_size, cause(error)), "see docs/trainers.md for the sizes "
                "each model takes"))
    return Builder(build_torchvision, name.startswith(("vit_", "maxvit_")))


def refused_keywords(name: str, extra: Dict[str, Any], error: BaseException) -> TrainerError:
    """The usage error of a constructor that refused a call: one naming ``--model_kwargs``
    where it was given some, else its own cause."""
    return TrainerError("--model={} refused --model_kwargs={}: {}".format(
        name, json.dumps(extra, sort_keys=True), cause(error)) if extra else
        "--model={} cannot be built: {}".format(name, cause(error)),
        "pass only keyword arguments its constructor takes (docs/trainers.md)", EX_USAGE)


def import_callable(name: str) -> Callable[..., Any]:
    """The function or class ``--model=PACKAGE.MODULE:CALLABLE`` names (imported); a
    ``TrainerError`` naming the part that is missing or wrong."""
    module_name, _, attribute = name.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise TrainerError("--model={} is not PACKAGE.MODULE:CALLABLE".format(name),
                           "e.g. --model=my_models.nets:build (a function or class of module "
                           "my_models.nets)")
    try:
        target = importlib.import_module(module_name)
    except Exception as error:  # the user's code: anything it raises is the cause
        hint = ("install it in an image built FROM this one, or put the folder that holds it "
                "on PYTHONPATH")
        if module_name.split(".")[0] == "timm":
            hint = "timm is installed in the pjrt image (torch_xla 2.x), not in the xrt image"
        raise TrainerError("--model={}: module {} does not import: {}".format(
            name, module_name, cause(error)), hint)
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise TrainerError("--model={}: {} has no attribute {}".format(
                name, getattr(target, "__name__", module_name), part),
                "name a function or class the module defines, after the colon")
        target = getattr(target, part)
    if not callable(target):
        raise TrainerError("--model={}: {} is of type {}, not a function or class".format(
            name, attribute, type(target).__name__), "name the function or class that builds "
            "the model")
    return target


def _user_builder(name: str, extra: Dict[str, Any]) -> Builder:
    module_name, _, attribute = name.partition(":")
    target = import_callable(name)
    size_keyword = _size_keyword(target, module_name)
    unknown = sorted(set(extra) - set(_keywords(target)))
    if unknown and not _takes_var_keywords(target):
        raise TrainerError("--model_kwargs: {} takes no keyword argument {}".format(
            attribute, unknown[0]), "pass only keyword arguments of {}{}".format(
                attribute, _signature(target)), EX_USAGE)

    def build_user(num_classes: int, image_size: int) -> torch.nn.Module:
        kwargs = dict(extra, num_classes=num_classes)  # type: Dict[str, Any]
        if size_keyword:
            kwargs[size_keyword] = image_size
        try:
            model = target(**kwargs)
        except TypeError as error:
            if size_keyword == "img_size" and "img_size" in str(error) and \
                    _takes_var_keywords(target):  # a timm builder whose model has no size
                kwargs.pop("img_size")
                model = _call(name, target, kwargs)
            else:
                raise _refused(name, attribute, kwargs, error)
        except Exception as error:
            raise _refused(name, attribute, kwargs, error)
        if not isinstance(model, torch.nn.Module):
            raise TrainerError("--model={}: {}(...) returned a {}, not a torch.nn.Module".format(
                name, attribute, type(model).__name__), "return the model itself")
        return model
    return Builder(build_user, size_keyword is not None)


def _call(name: str, target: Callable[..., Any], kwargs: Dict[str, Any]) -> Any:
    try:
        return target(**kwargs)
    except Exception as error:
        raise _call_failed(name, getattr(target, "__name__", "callable"), kwargs, error)


def _refused(name: str, attribute: str, kwargs: Dict[str, Any],
             error: BaseException) -> ModelRefused:
    """A call that failed: a refusal of the image size where another size builds the model
    (``build_checked`` looks), else ``_call_failed``."""
    return ModelRefused(cause(error), _call_failed(name, attribute, kwargs, error))


def _call_failed(name: str, attribute: str, kwargs: Dict[str, Any],
                 error: BaseException) -> TrainerError:
    return TrainerError("--model={}: {}({}) failed: {}".format(
        name, attribute, ", ".join("{}={!r}".format(*item) for item in kwargs.items()),
        cause(error)), "it is called with num_classes (and the image size as image_size or "
        "img_size where its signature names one)")


def _size_keyword(target: Callable[..., Any], module_name: str) -> Optional[str]:
    """The keyword ``target`` takes the image size under: one its signature names; for timm's
    builders (``**kwargs`` passed on to the model) ``img_size``; else none."""
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return None
    for keyword in SIZE_KEYWORDS:
        if keyword in parameters:
            return keyword
    if module_name.split(".")[0] == "timm" and _takes_var_keywords(target):
        return "img_size"
    return None


def _keywords(target: Callable[..., Any]) -> Iterable[str]:
    """The names ``target`` takes as keyword arguments (none where it has no signature)."""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return ()
    return [p.name for p in parameters
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def _signature(target: Callable[..., Any]) -> str:
    try:
        return str(inspect.signature(target))
    except (TypeError, ValueError):
        return "(...)"


def _takes_var_keywords(target: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)


class ModelRefused(Exception):
    """The model could not be built for the image size asked for: ``cause`` (one line), and
    ``error``, the usage error to report where no other size builds it either."""

    def __init__(self, cause_line: str, error: TrainerError) -> None:
        super().__init__(cause_line)
        self.error = error


def cause(error: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    text = str(error).strip().splitlines()
    line = "{}: {}".format(type(error).__name__, text[0]) if text else type(error).__name__
    return line if len(line) <= 240 else line[:237] + "..."


def check_input(name: str, model: torch.nn.Module, make: Builder, num_classes: int,
                global_batch: int, image_size: int) -> None:
    """Refuse, naming the flag to change, a ``model`` (``--model=name``, built by ``make``)
    that cannot train on a global batch of ``global_batch`` images of ``image_size`` pixels
    or does not return ``global_batch x num_classes`` logits. Leaves ``model``, its weights
    and buffers and the random state as they were."""
    problem, ran = _probe(model, global_batch, image_size, num_classes)
    if problem is None:
        return
    if BATCH_NORM_CAUSE in problem:
        size = _next_size(make, model, num_classes, global_batch, image_size)
        raise TrainerError(
            "a global batch of {} at --image_size={} leaves --model={}'s BatchNorm layers one "
            "value per channel, which cannot be trained".format(global_batch, image_size, name),
            "use a larger --batch_size{}".format(
                ", or --image_size={} or more".format(size) if size else ""))
    _refuse(name, make, model, num_classes, global_batch, image_size, problem, ran)


def build_checked(name: str, make: Builder, num_classes: int, global_batch: int,
                  image_size: int) -> torch.nn.Module:
    """``make(num_classes, image_size)``, where a construction that refuses the image size (a
    ViT whose patch does not divide it, a MaxViT partition) is refused naming ``--model`` and
    ``--image_size``, with the smallest size above it that the model takes."""
    try:
        return make(num_classes, image_size)
    except ModelRefused as refused:
        size = _next_size(make, None, num_classes, global_batch, image_size) \
            if make.takes_size else None
        if size:
            raise _size_error(name, image_size, str(refused), size)
        raise refused.error


def _refuse(name: str, make: Builder, model: Optional[torch.nn.Module], num_classes: int,
            global_batch: int, image_size: int, problem: str, ran: int) -> None:
    """Refuse the model whose forward pass on ``ran`` images (the batch the check ran,
    ``_probe``) failed with ``problem``."""
    size = _next_size(make, model, num_classes, global_batch, image_size)
    if size:
        raise _size_error(name, image_size, problem, size)
    raise TrainerError("--model={} fails its first forward pass on {} x 3 x {} x {} images: {}"
                       .format(name, ran, image_size, image_size, problem),
                       "the model must take normalized float images B x 3 x S x S and return "
                       "logits B x {} (docs/trainers.md)".format(num_classes))


def _size_error(name: str, image_size: int, problem: str, size: int) -> TrainerError:
    return TrainerError("--model={} cannot take --image_size={}: {}".format(
        name, image_size, problem), "use --image_size={} (the smallest size above it that the "
        "model takes)".format(size))


def _next_size(make: Builder, model: Optional[torch.nn.Module], num_classes: int,
               global_batch: int, image_size: int) -> Optional[int]:
    """An image size above ``image_size`` (within ``SIZE_SEARCH``) that the model takes at
    ``global_batch``, tried on the meta device only (torch 2.x); None if none is found.

    A model built for its size (ViT, MaxViT) is built for each size up from ``image_size``
    until one builds and runs: a size it refuses costs no forward pass. Otherwise the one
    model meets sizes doubling their distance from ``image_size`` until one runs, then a
    bisection below it finds the smallest: a feature map too small for a layer only grows
    with the image (a meta forward pass takes about a second on a busy host, so not 256 of
    them)."""
    if not hasattr(torch, "func"):
        return None
    if model is None or make.takes_size:
        for size in range(image_size + 1, image_size + SIZE_SEARCH + 1):
            try:
                with torch.device("meta"), torch.random.fork_rng(devices=[]):
                    candidate = make(num_classes, size)
            except ModelRefused:
                continue
            except Exception:  # a model that cannot be built on the meta device: no search
                return None
            if _runs(candidate, global_batch, size, num_classes):
                return size
        return None
    low, step = image_size, 1  # low: a size known not to run
    while step <= SIZE_SEARCH and not _runs(model, global_batch, image_size + step,
                                            num_classes):
        low, step = image_size + step, step * 2
    if step > SIZE_SEARCH:
        return None
    high = image_size + step  # runs
    while high - low > 1:
        middle = (low + high) // 2
        if _runs(model, global_batch, middle, num_classes):
            high = middle
        else:
            low = middle
    return high


def _runs(model: torch.nn.Module, batch: int, image_size: int, num_classes: int) -> bool:
    return _probe(model, batch, image_size, num_classes, host_fallback=False)[0] is None


def _probe(model: torch.nn.Module, batch: int, image_size: int, num_classes: int,
           host_fallback: bool = True) -> Tuple[Optional[str], int]:
    """(None if ``model`` in training mode takes ``batch`` float images of ``image_size`` and
    returns ``batch x num_classes`` logits, else the cause; the batch of the forward pass that
    decided). Shapes only, on the meta device; where that cannot run the forward pass (torch
    1.x, an operation without a meta kernel), a copy on the host CPU at a batch of
    min(batch, 2) decides, and its batch is the one a message names."""
    problem = _meta_forward(model, batch, image_size, num_classes)
    if problem is None or not host_fallback:
        return problem, batch
    host_batch = min(batch, 2)
    return _host_forward(model, host_batch, image_size, num_classes), host_batch


def _meta_forward(model: torch.nn.Module, batch: int, image_size: int,
                  num_classes: int) -> Optional[str]:
    if not hasattr(torch, "func"):
        return "no meta device in torch {}".format(torch.__version__)
    tensors = {name: tensor.to("meta") for name, tensor in _named_state(model)}
    images = torch.zeros(batch, 3, image_size, image_size, device="meta")
    return _forward(model, lambda: torch.func.functional_call(model, tensors, (images,)),
                    batch, num_classes)


def _host_forward(model: torch.nn.Module, batch: int, image_size: int,
                  num_classes: int) -> Optional[str]:
    clone = copy.deepcopy(model).cpu()
    with torch.random.fork_rng(devices=[]):
        images = torch.rand(batch, 3, image_size, image_size)
        return _forward(clone, lambda: clone(images), batch, num_classes)


def _forward(model: torch.nn.Module, call: Callable[[], Any], batch: int,
             num_classes: int) -> Optional[str]:
    was_training = model.training
    model.train()
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            output = call()
    except Exception as error:  # anything the model raises is the cause
        return cause(error)
    finally:
        model.train(was_training)
    if not isinstance(output, torch.Tensor):
        return "it returned a {}, not a tensor of logits".format(type(output).__name__)
    if tuple(output.shape) != (batch, num_classes):
        return "it returned a tensor of shape {}, not {} x {} logits".format(
            tuple(output.shape), batch, num_classes)
    return None


def _named_state(model: torch.nn.Module):  # type: ignore[no-untyped-def]
    for name, tensor in model.named_parameters():
        yield name, tensor
    for name, tensor in model.named_buffers():
        yield name, tensor
