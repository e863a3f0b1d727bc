"""trainer.data.resample: one antialiased bilinear crop+resize, by torch's uint8 kernel or
by Pillow, with the same result."""

import pytest
import torch
from PIL import Image

from trainer.data import resample

RESAMPLERS = [resample.by_torch, resample.by_pillow]


def noise(width: int, height: int, seed: int = 0) -> Image.Image:
    """Uniform noise: every pixel differs from its neighbours, the hardest input for two
    resamplers to agree on."""
    pixels = torch.randint(0, 256, (height, width, 3), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(seed))
    return Image.fromarray(pixels.numpy(), "RGB")


def test_the_pinned_torch_has_the_vectorized_uint8_kernel():
    # torch 2.9 (the dev venv and the PJRT image) has it; without it every image would take
    # Pillow's path, correct but about 3x slower, and nothing else would say so.
    assert resample.torch_resamples_uint8()


@pytest.mark.parametrize("box, size", [
    ((0, 0, 500, 375), 224),     # the whole image, down
    ((37, 12, 337, 312), 224),   # a typical crop, down by 1.34
    ((200, 100, 260, 180), 224),  # a small crop, up by 3.7
    ((0, 0, 500, 375), 17),      # far down: wide filters
    ((120, 0, 121, 375), 64),    # a one-pixel sliver
])
@pytest.mark.parametrize("flip", [False, True])
def test_torch_and_pillow_agree_within_two_levels(box, size, flip):
    # Both compute the same separable filter in fixed point, each pass rounded to uint8; only
    # their weights' precision differs (Pillow 22 bits, torch the most an int16 holds). A
    # pass's sum over k taps then differs by at most 255 * k * 2^-(bits+1) < 1 (k < 64 here),
    # so the horizontal pass's results differ by <= 1 after rounding; the vertical pass
    # averages them with weights summing to 1 (<= 1) plus the same weight error (< 1): <= 2.
    image = noise(500, 375)
    by_torch = resample.by_torch(image, box, size, flip).int()
    by_pillow = resample.by_pillow(image, box, size, flip).int()
    assert by_torch.shape == by_pillow.shape == (3, size, size)
    assert (by_torch - by_pillow).abs().max() <= 2


@pytest.mark.parametrize("resampler", RESAMPLERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", ["RGB", "L", "CMYK", "P", "RGBA", "I;16"])
def test_every_mode_becomes_rgb(resampler, mode):
    image = Image.new("RGB", (40, 30), (200, 100, 50)).convert(mode)
    resized = resampler(image, (5, 5, 35, 25), 16, False)
    assert resized.shape == (3, 16, 16) and resized.dtype == torch.uint8


@pytest.mark.parametrize("resampler", RESAMPLERS, ids=lambda f: f.__name__)
def test_flip_mirrors_left_to_right(resampler):
    image = noise(64, 48, seed=1)
    box = (3, 4, 50, 40)
    assert torch.equal(resampler(image, box, 32, True), resampler(image, box, 32, False).flip(2))


@pytest.mark.parametrize("box, expected", [
    ((10.4, 20.6, 99.5, 80.49), (10, 21, 100, 80)),  # to the nearest pixel (half to even)
    ((-0.3, -0.2, 200.4, 100.2), (0, 0, 200, 100)),    # clamped to the image
    ((50.2, 7.0, 50.4, 7.3), (50, 7, 51, 8)),          # a sliver keeps one pixel
    ((199.8, 99.9, 200.0, 100.0), (199, 99, 200, 100)),  # ... also at the far edge
])
def test_pixel_box_rounds_inside_the_image_and_keeps_a_pixel(box, expected):
    assert resample.pixel_box(box, 200, 100) == expected


@pytest.mark.parametrize("box", [(0, 0, 173, 91), (31.4, 7.6, 300, 200), (299, 199, 300, 200)])
def test_the_mirror_taken_before_the_resize_is_the_mirror_of_the_resized_region(box):
    # tensor_crop_resized mirrors the region while copying it out: the filter's weights are
    # symmetric about each output pixel, so the integers are the same as mirroring after.
    pixels = torch.randint(0, 256, (200, 300, 3), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(1)).permute(2, 0, 1)
    for size in (64, 224):
        mirrored = resample.tensor_crop_resized(pixels, box, size, True)
        assert torch.equal(mirrored, resample.tensor_crop_resized(pixels, box, size, False)
                           .flip(2))
