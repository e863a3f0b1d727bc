"""trainer.data.images: one image to uint8 ``3 x size x size``, normalized on the device."""

import io
import random

import damaged_jpegs
import numpy
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

from trainer.data import images, jpeg_decode, resample
from trainer.errors import DataError


def encoded(image, kind="JPEG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, kind, **options)
    return buffer.getvalue()


@given(st.integers(1, 5000), st.integers(1, 5000), st.integers(0, 2 ** 32))
@example(1, 5000, 0)  # too narrow for any allowed aspect: the centre fallback
def test_crop_box_is_inside_the_image_with_torchvisions_area_and_aspect(width, height, seed):
    left, top, right, bottom = images.crop_box(width, height, random.Random(seed))
    assert 0 <= left < right <= width and 0 <= top < bottom <= height
    w, h = right - left, bottom - top
    if (w, h) != (width, height) and (left, top) != ((width - w) // 2, (height - h) // 2):
        # A drawn box: its area fraction and aspect within the ranges, up to the rounding
        # of each side to whole pixels (half a pixel each).
        assert w * h <= width * height
        assert (w + 0.5) * (h + 0.5) >= images.SCALE[0] * width * height
        assert images.RATIO[0] * (h - 0.5) / (h + 0.5) <= w / h
        assert w / h <= images.RATIO[1] * (w + 0.5) / (w - 0.5)


@pytest.mark.parametrize("mode, kind", [("RGB", "JPEG"), ("L", "JPEG"), ("CMYK", "JPEG"),
                                        ("RGB", "PNG"), ("P", "PNG"), ("RGBA", "PNG")])
def test_every_mode_becomes_rgb_uint8_of_the_asked_size(mode, kind):
    data = encoded(Image.new("RGB", (300, 200), (200, 100, 50)).convert(mode), kind)
    for image in (images.train_image(data, 64, random.Random(1)), images.eval_image(data, 64)):
        assert image.shape == (3, 64, 64) and image.dtype == torch.uint8


def test_a_flat_colour_stays_that_colour_through_the_reduced_decode():
    # JPEG codes a flat 8x8 block exactly in its DC term, so every decode scale and resample
    # gives the colour back up to the colour conversion's rounding (+-2 levels).
    data = encoded(Image.new("RGB", (4000, 3000), (200, 100, 50)), quality=95)
    for image in (images.train_image(data, 64, random.Random(2)), images.eval_image(data, 64)):
        colour = image.reshape(3, -1).float()
        assert (colour - torch.tensor([[200.0], [100.0], [50.0]])).abs().max() <= 2


def test_evaluation_keeps_the_centre_and_training_flips_half_the_time():
    # Left half black, right half white: the centre crop keeps both halves in place.
    picture = Image.new("L", (400, 300), 0)
    picture.paste(255, (200, 0, 400, 300))
    data = encoded(picture, "PNG")
    centre = images.eval_image(data, 32)[0].float()
    assert centre[:, :14].max() < 30 and centre[:, -14:].min() > 225
    flips = 0
    for seed in range(200):
        crop = images.train_image(data, 32, random.Random(seed))[0].float()
        flips += int(crop[:, 0].mean() > crop[:, -1].mean())  # white on the left: mirrored
    # Crops that fall in one half look the same either way and count as not mirrored; of the
    # rest half are. Binomial: 200 draws stay within these bounds with p > 0.999.
    assert 25 <= flips <= 100


def test_the_decode_is_reduced_only_as_far_as_the_crop_allows():
    data = encoded(Image.new("RGB", (4000, 3000), (1, 2, 3)), quality=90)
    centre = images.centre_box(4000, 3000, 224)  # 2625 px square: 1/8 leaves 328 px
    whole = (0, 0, 4000, 3000)
    small = (100, 100, 400, 400)  # 300 px: 1/2 would leave 150 px, too few
    for box, decoded in ((centre, (500, 375)), (whole, (500, 375)), (small, (4000, 3000))):
        image = images.open_image(data)
        image.draft("RGB", images.draft_size(4000, 3000, box, 224))
        assert image.size == decoded, box
        # simplejpeg's decode takes the same scale (test_jpeg_decode: the same size).
        assert -(-4000 // images.reduction(4000, 3000, box, 224)) == decoded[0], box
        scale = image.size[0] / 4000
        assert min(box[2] - box[0], box[3] - box[1]) * scale >= 224


def test_normalize_is_imagenets_mean_and_std_on_the_float_image():
    x = torch.randint(0, 256, (2, 3, 5, 7), dtype=torch.uint8, generator=torch.Generator()
                      .manual_seed(0))
    mean = torch.tensor(images.MEAN).view(1, 3, 1, 1)
    std = torch.tensor(images.STD).view(1, 3, 1, 1)
    expected = (x.double() / 255 - mean.double()) / std.double()
    # float32 on the host's CPU, (x - 255*mean) * (1 / (255*std)), u = 2^-24: the constant
    # 255*mean (< 256) is off by <= 256u = 1.5e-5 and x minus it (< 256) rounds by as much,
    # each scaled by 1/(255*std) < 0.0175: 5.3e-7; the product (< 2.7) rounds by <= 4u and
    # the constant 1/(255*std) by 2.7u: 4e-7. At most 9.3e-7 on any IEEE-754 CPU: atol 1e-6.
    assert torch.allclose(images.normalize(x).double(), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("cut", [0, 12, 1 / 3])
def test_what_does_not_decode_is_a_data_error_naming_it(cut):
    # Nothing, a file that is no image, a JPEG cut short (its header is whole: it opens, then
    # its data ends, in torchvision's decoder and in Pillow's).
    whole = encoded(Image.new("RGB", (300, 200), (200, 100, 50)), quality=90)
    data = b"not an image" if cut == 12 else whole[:int(len(whole) * cut)]
    for decode in (lambda: images.eval_image(data, 32, "shard.tar#key"),
                   lambda: images.train_image(data, 300, random.Random(0), "shard.tar#key")):
        with pytest.raises(DataError, match=r"^cannot decode shard.tar#key: \w") as raised:
            decode()
        assert raised.value.exit_code == 65 and "make_shards" in raised.value.hint
        assert "BytesIO" not in raised.value.message


def test_a_jpeg_past_the_pixel_limit_is_refused_before_any_decode(monkeypatch):
    # A small JPEG whose frame header claims 65,000 x 65,000 pixels (4.2 billion, past twice
    # MAX_PIXELS): refused as Pillow refuses it, from its header. A whole stream that size
    # would decode in simplejpeg (200 MB at 1/8, in every worker): no decoder may be reached.
    def no_decode(*args):
        raise AssertionError("decoded an image past the pixel limit")

    monkeypatch.setattr(jpeg_decode, "scaled", no_decode)
    monkeypatch.setattr(jpeg_decode, "decoded", no_decode)
    data = bytearray(encoded(Image.new("RGB", (64, 48), (10, 20, 30)), quality=90))
    frame = data.index(b"\xff\xc0")  # SOF0: length, precision, then height and width
    data[frame + 5:frame + 9] = (65000).to_bytes(2, "big") * 2
    for decode in (lambda: images.eval_image(bytes(data), 32, "big.jpg"),
                   lambda: images.train_image(bytes(data), 32, random.Random(0), "big.jpg")):
        with pytest.raises(DataError, match=r"^cannot decode big.jpg: .*decompression bomb"):
            decode()


@pytest.mark.parametrize("mode, kind", [("RGB", "JPEG"), ("L", "JPEG"), ("RGB", "PNG")])
def test_each_full_size_path_gives_the_crop_that_pillow_alone_gives(mode, kind, monkeypatch):
    # Plain JPEGs take simplejpeg's decode, the rest Pillow's; torch resizes both. With no
    # reduced decode (224 px from crops under 448 px) and the accurate IDCT, the pixels
    # decoded are Pillow's (test_jpeg_decode), so only the two resamplers differ: at most 2
    # levels (test_resample). The fast IDCT's own bound: the photographs' test below.
    monkeypatch.setattr(jpeg_decode, "FAST_DCT", False)
    y, x = torch.meshgrid(torch.arange(375.0), torch.arange(500.0), indexing="ij")
    wave = ((x / 16).sin() * (y / 16).cos() + 1) * 120
    picture = Image.fromarray(torch.stack([wave, 240 - wave, wave / 2], -1).to(torch.uint8)
                              .numpy(), "RGB").convert(mode)
    data = encoded(picture, kind, **({"quality": 90} if kind == "JPEG" else {}))
    for seed in range(4):
        draws = random.Random(seed)
        box = images.crop_box(500, 375, draws)
        flip = draws.random() < 0.5
        expected = resample.by_pillow(Image.open(io.BytesIO(data)), box, 224, flip).int()
        got = images.train_image(data, 224, random.Random(seed)).int()
        assert (got - expected).abs().max() <= 2, seed


# What the reduced decode may change, on photographs: libjpeg's 1/2, 1/4 and 1/8 scaling
# averages in the DCT domain instead of the resampling filter, and the crop box is rounded to
# whole pixels of the smaller image. Measured on scikit-image's photographs (tests/photos.py)
# at 1,600 to 4,000 px: a mean absolute difference of 0.4 to 3.2 levels per 224 px image.
REDUCED_DECODE_MEAN_LEVELS = 4


@pytest.mark.parametrize("name", ["astronaut", "coins", "galaxies"])
def test_the_reduced_decode_of_a_photograph_is_within_the_stated_bound_of_the_full_decode(name):
    import photos

    photo = photos.source_photos()[name]
    if max(photo.size) < 1500:
        photo = photo.resize((photo.size[0] * 4, photo.size[1] * 4), Image.BICUBIC)
    data = encoded(photo, quality=90)
    width, height = photo.size
    reduced = 0
    for seed in range(3):
        draws = random.Random(seed)
        box = images.crop_box(width, height, draws)
        flip = draws.random() < 0.5
        image = images.open_image(data)
        image.draft("RGB", images.draft_size(width, height, box, 224))
        reduced += image.size[0] < width
        full = resample.by_pillow(Image.open(io.BytesIO(data)), box, 224, flip).float()
        got = images.train_image(data, 224, random.Random(seed)).float()
        assert (got - full).abs().mean() <= REDUCED_DECODE_MEAN_LEVELS, seed
    assert reduced == 3  # every one of these crops took the reduced decode
    full = resample.by_pillow(Image.open(io.BytesIO(data)),
                              images.centre_box(width, height, 224), 224, False).float()
    assert (images.eval_image(data, 224).float() - full).abs().mean() \
        <= REDUCED_DECODE_MEAN_LEVELS


def photograph_crops():
    """(JPEG bytes, box, flip) of issue 49's kind of photographs (tests/photos.py: long side
    500 px, quality 90, 4:2:0), three training crops and the evaluation's centre each."""
    import photos

    found = []
    for _, photo in sorted(photos.source_photos().items())[:4]:
        scale = 500 / max(photo.size)
        photo = photo.resize((round(photo.size[0] * scale), round(photo.size[1] * scale)),
                             Image.BILINEAR)
        data = encoded(photo, quality=90)
        width, height = photo.size
        for seed in range(3):
            draws = random.Random(seed)
            box = images.crop_box(width, height, draws)
            found.append((data, box, draws.random() < 0.5, seed))
        found.append((data, images.centre_box(width, height, 224), False, None))
    return found


def test_the_fast_idct_decode_is_within_its_bound_of_the_accurate_full_decode_and_resize():
    # simplejpeg's fast integer IDCT (FAST_DCT) against Pillow's accurate full-size decode,
    # the same crop and flip resized by the same filter. The filter's weights are
    # non-negative and sum to 1, so the resized images differ by at most the decodes' largest
    # difference in the region, and on average by at most the decodes' mean difference, each
    # plus 1 level for the two roundings to integers. These crops take no reduced decode
    # (none keeps 448 px), so nothing else differs.
    import numpy

    assert jpeg_decode.FAST_DCT
    for data, box, flip, seed in photograph_crops():
        accurate = torch.from_numpy(numpy.array(Image.open(io.BytesIO(data)).convert("RGB")))
        width, height = accurate.shape[1], accurate.shape[0]
        assert images.reduction(width, height, box, 224) == 1
        fast = jpeg_decode.scaled(data, width, height, 1).permute(1, 2, 0)
        left, top, right, bottom = resample.pixel_box(box, width, height)
        decoded = (fast.int() - accurate.int()).abs()[top:bottom, left:right]
        assert decoded.max() <= 8  # libjpeg-turbo's fast IDCT on photographs (docs/benchmarks.md)
        expected = resample.tensor_crop_resized(accurate.permute(2, 0, 1), box, 224, flip)
        got = (images.train_image(data, 224, random.Random(seed)) if seed is not None
               else images.eval_image(data, 224))
        difference = (got.int() - expected.int()).abs()
        assert difference.max() <= decoded.max() + 1, seed
        assert difference.float().mean() <= decoded.float().mean() + 1, seed


@pytest.mark.skipif(jpeg_decode.decoder() not in ("region", "simplejpeg"),
                    reason="a strict decoder (the region decoder or simplejpeg) is not here")
def test_a_jpeg_damaged_inside_is_damage_never_pillows_made_up_pixels(monkeypatch):
    """A JPEG cut in half with its End Of Image marker appended: libjpeg warns (premature end
    of data) where the centre crop reaches the cut. The strict decoders' error used to send it
    to Pillow, which ignores the warning and returned grey rows as an image."""
    def no_pillow(*args):
        raise AssertionError("handed a damaged JPEG to Pillow")

    picture = Image.effect_noise((320, 240), 64).convert("RGB")
    whole = encoded(picture, quality=90)
    damaged = whole[:len(whole) // 2] + b"\xff\xd9"
    monkeypatch.setattr(images, "open_image", no_pillow)
    with pytest.raises(images.DamagedImage, match=r"^cannot decode cut.jpg: .*JPEG") as raised:
        images.eval_image(damaged, 64, "cut.jpg")
    assert raised.value.name == "cut.jpg" and raised.value.exit_code == 65


_SMALL_JPEG = encoded(Image.effect_noise((48, 40), 64).convert("RGB"), quality=85)


@settings(deadline=None)  # the first call loads the decoders (about 0.6 s)
@given(st.lists(st.tuples(st.integers(0, len(_SMALL_JPEG) - 1), st.integers(0, 255)),
                max_size=8), st.integers(0, len(_SMALL_JPEG)), st.booleans())
@example([(2 + 3, 0xC4)], len(_SMALL_JPEG), False)  # a frame marker where a table was
def test_bad_bytes_are_a_damaged_image_or_an_image_never_another_error(edits, cut, end_marker):
    """Whatever bytes a bucket holds, a decode gives a tensor or a DamagedImage naming the
    file: simplejpeg's header raised KeyError: 6 for a 4:4:1 file, a traceback."""
    data = bytearray(_SMALL_JPEG)
    for at, value in edits:
        data[at] = value
    data = bytes(data[:cut]) + (b"\xff\xd9" if end_marker else b"")
    for decode in (lambda: images.eval_image(data, 32, "x.jpg"),
                   lambda: images.train_image(data, 32, random.Random(0), "x.jpg"),
                   lambda: images.verify(data, "x.jpg")):
        try:
            image = decode()
        except images.DamagedImage as damaged:
            assert damaged.name == "x.jpg" and "\n" not in damaged.message
        else:
            assert image is None or image.shape == (3, 32, 32)


_PHOTO_JPEG = encoded(Image.effect_noise((320, 240), 64).convert("RGB"), quality=90)
DAMAGE = damaged_jpegs.DAMAGE


@pytest.mark.parametrize("whole", [False, True], ids=["the decoder here", "whole decodes"])
@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_each_kind_of_damage_is_a_damaged_image_whatever_the_crop(kind, whole, monkeypatch):
    """Every crop of a damaged file is a DamagedImage, however little of the file it needs:
    a zeroed run or a mismatched frame decode on with wrong pixels and no error until the
    scan's end, so the region decoder reads every file to its End Of Image marker
    (jpeg_decode.CHECK_TO_END); the whole-image decoders read it all anyway."""
    if whole:
        monkeypatch.setattr(jpeg_decode, "_region_module", lambda: None)
    data = DAMAGE[kind](_PHOTO_JPEG)
    decodes = [lambda: images.verify(data, "bad.jpg"),
               lambda: images.eval_image(data, 64, "bad.jpg")]
    # Small crops of the top left: the least of the file a crop needs.
    decodes += [lambda seed=seed: images.train_image(data, 64, random.Random(seed), "bad.jpg")
                for seed in range(6)]
    for decode in decodes:
        with pytest.raises(images.DamagedImage) as raised:
            decode()
        assert raised.value.name == "bad.jpg" and "\n" not in raised.value.message


def _flat_441() -> bytes:
    """A valid 4:4:1 JPEG (luma sampled 1 across, 4 down: what jpegtran -transpose makes of
    4:1:1), which no encoder here writes: a flat 32 x 32 colour encoded 4:1:1 by simplejpeg,
    its luma sampling then declared 1 x 4. Both layouts code 4 luma blocks and one of each
    chroma per MCU and 4 MCUs in all, and every block of a flat image is the same, so the
    scan is the same bytes: nothing in it is damaged."""
    simplejpeg = pytest.importorskip("simplejpeg")
    pixels = numpy.full((32, 32, 3), (200, 100, 50), numpy.uint8)
    data = simplejpeg.encode_jpeg(pixels, 95, "RGB", "411")
    assert data[damaged_jpegs.frame(data) + 11] == 0x41
    return damaged_jpegs.edited(data, [(damaged_jpegs.frame(data) + 11, 0x14)])


def _ycck() -> bytes:
    """A YCCK JPEG: Pillow's CMYK file with its Adobe segment's transform set to 2 (libjpeg
    then reads the components as YCCK)."""
    data = encoded(Image.new("CMYK", (64, 48), (30, 60, 90, 10)))
    adobe = data.index(b"\xff\xee")  # marker, length, "Adobe", version, 2 flags, transform
    assert data[adobe + 4:adobe + 9] == b"Adobe" and data[adobe + 15] == 0
    return damaged_jpegs.edited(data, [(adobe + 15, 2)])


VALID_UNUSUAL = {
    "CMYK": lambda: encoded(Image.new("CMYK", (64, 48), (30, 60, 90, 10))),
    "YCCK": _ycck,
    "grayscale": lambda: encoded(Image.effect_noise((64, 48), 64)),
    "progressive": lambda: encoded(Image.effect_noise((64, 48), 64).convert("RGB"),
                                   progressive=True),
    "restart markers": lambda: encoded(Image.effect_noise((64, 48), 64).convert("RGB"),
                                       restart_marker_blocks=2),
    "4:4:1": _flat_441,
}


@pytest.mark.parametrize("kind", sorted(VALID_UNUSUAL))
def test_valid_unusual_jpegs_decode_to_rgb_and_are_never_damage(kind):
    data = VALID_UNUSUAL[kind]()
    images.verify(data, "odd.jpg")
    for image in [images.eval_image(data, 32, "odd.jpg")] + [
            images.train_image(data, 32, random.Random(seed), "odd.jpg") for seed in range(4)]:
        assert image.shape == (3, 32, 32) and image.dtype == torch.uint8
    if kind == "4:4:1":  # the flat colour back, up to the colour conversion's rounding
        assert (images.eval_image(data, 32).reshape(3, -1).float()
                - torch.tensor([[200.0], [100.0], [50.0]])).abs().max() <= 2
