"""A small convolutional classifier: ``--model=mymodels.tiny:tiny_net`` (docs/own-code.md).

The ImageNet trainer calls ``tiny_net(num_classes=N, image_size=S)`` once, with the data's
class count and ``--image_size``, and trains what it returns on normalized float images
``B x 3 x S x S``; the module returns logits ``B x N``.
"""

from torch import nn


def tiny_net(num_classes, image_size, width=16):
    """Two strided 3 x 3 convolutions (S -> S/4), then a linear layer over the whole feature
    map: its size depends on the image size, which is why the trainer passes it."""
    if image_size < 4 or image_size % 4:
        # The trainer reports this as one line naming --image_size (exit 64).
        raise ValueError("image_size must be a multiple of 4, got {}".format(image_size))
    side = image_size // 4
    return nn.Sequential(
        nn.Conv2d(3, width, 3, stride=2, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.BatchNorm2d(2 * width),
        nn.ReLU(), nn.Flatten(), nn.Linear(2 * width * side * side, num_classes))
