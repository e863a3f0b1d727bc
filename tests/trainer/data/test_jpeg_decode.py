"""trainer.data.jpeg_decode: a JPEG straight to a uint8 tensor, the same pixels as Pillow."""

import functools
import io
import random
import re
import sys

import numpy
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from PIL import Image

from conftest import REGION_DECODER_BUILDABLE
from trainer.data import jpeg_decode


def jpeg(image: Image.Image, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


def photo_like(width: int, height: int) -> Image.Image:
    """Smooth shapes plus noise, subsampled chroma (Pillow's default 4:2:0): what the decoder's
    upsampling and IDCT see in a photograph."""
    y, x = torch.meshgrid(torch.arange(height, dtype=torch.float32),
                          torch.arange(width, dtype=torch.float32), indexing="ij")
    noise = torch.rand((3, height, width), generator=torch.Generator().manual_seed(0))
    channels = torch.stack([x / width, y / height, (x * y).sin() / 2 + 0.5]) * 200 + noise * 55
    return Image.fromarray(channels.permute(1, 2, 0).to(torch.uint8).numpy(), "RGB")


def test_the_pinned_torchvision_decodes():
    # Without it every JPEG would take Pillow's slower path, and nothing else would say so.
    assert jpeg_decode.available()


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_the_pixels_are_pillows(mode):
    # Both are libjpeg-turbo with its defaults (the accurate integer IDCT, smooth chroma
    # upsampling), whose every build computes the same integers: equal, not close.
    data = jpeg(photo_like(301, 203).convert(mode), quality=85)
    expected = torch.from_numpy(numpy.array(Image.open(io.BytesIO(data)).convert("RGB")))
    decoded = jpeg_decode.decoded(data)
    assert decoded.dtype == torch.uint8 and decoded.shape == (3, 203, 301)
    assert torch.equal(decoded, expected.permute(2, 0, 1))


@pytest.mark.parametrize("data", [b"", b"\xff\xd8\xff", b"not a jpeg at all"])
def test_what_is_not_a_whole_jpeg_is_an_os_error(data):
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.decoded(data)


def test_a_sampling_simplejpeg_has_no_table_for_goes_to_pillow_not_a_traceback():
    """4:4:1 (the luma 1 x 4, what jpegtran -transpose makes of 4:1:1): simplejpeg's header
    raised KeyError: 6, which ended the run naming no file; header() now leaves it to
    Pillow, as for a CMYK file."""
    stream = io.BytesIO()
    noise = numpy.random.RandomState(0).randint(0, 256, (32, 32, 3), dtype=numpy.uint8)
    Image.fromarray(noise).save(stream, "JPEG", subsampling=0, quality=90)
    data = bytearray(stream.getvalue())
    frame = data.index(b"\xff\xc0")
    data[frame + 11] = 0x14  # the first component's sampling: 1 across, 4 down
    assert jpeg_decode.header(bytes(data)) is None


def test_a_truncated_jpeg_is_an_os_error_not_a_grey_image():
    data = jpeg(photo_like(200, 150))
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.decoded(data[:len(data) // 2])




def test_simplejpeg_decodes_here_and_the_start_up_line_says_so(monkeypatch):
    # Pinned in the dev lock (as in the pjrt image's): without it the decode falls back to
    # torchvision's, about 1.2x the CPU per image (bench/decode_pairs.py), without an error.
    monkeypatch.setattr(jpeg_decode, "_region_module", lambda: None)
    jpeg_decode.decoder.cache_clear()
    try:
        assert jpeg_decode.decoder() == "simplejpeg"
        assert jpeg_decode.described().startswith("JPEGs decoded by simplejpeg 1.")
    finally:
        monkeypatch.undo()
        jpeg_decode.decoder.cache_clear()


@pytest.mark.skipif(not REGION_DECODER_BUILDABLE, reason="no C compiler or jpeglib.h: the "
                    "region decoder is not built here (make venv said so)")
def test_the_region_decoder_is_built_here_and_the_start_up_line_says_so():
    assert jpeg_decode.decoder() == "region"
    assert re.fullmatch(r"JPEGs decoded by libjpeg-turbo [23]\.\d+\.\d+, the crop's region "
                        r"only \(fast IDCT\)", jpeg_decode.described())


# What a region's edges meet in libjpeg-turbo: chroma subsampled both ways, one way, not at
# all; progressive; restart markers; grayscale. 301 x 203: neither side a whole iMCU.
ENCODINGS = {
    "4:2:0": dict(subsampling=2), "4:2:2": dict(subsampling=1), "4:4:4": dict(subsampling=0),
    "progressive": dict(progressive=True), "restarts": dict(restart_marker_blocks=1),
    "gray": dict(mode="L")}


@functools.lru_cache(maxsize=None)
def encoded(name: str) -> bytes:
    options = dict(ENCODINGS[name])
    return jpeg(photo_like(301, 203).convert(options.pop("mode", "RGB")), quality=85, **options)


@pytest.mark.skipif(jpeg_decode.decoder() != "region", reason="the region decoder is not built")
# No deadline: an example's first decode of an encoding also encodes it (a loaded machine
# took 0.2 s), and the time is not what the test checks.
@settings(deadline=None)
@given(st.sampled_from(sorted(ENCODINGS)), st.sampled_from([1, 2, 4, 8]), st.booleans(),
       st.booleans(), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
@example("4:2:0", 1, True, False, 16 / 301, 16 / 203, 31 / 301, 31 / 203)  # on iMCU bounds
@example("4:2:0", 1, True, True, 0, 0, 1, 1)  # the whole image
@example("4:2:2", 2, False, False, 1, 1, 1, 1)  # the last pixel alone
@example("4:2:0", 1, False, False, 0, 0, 0, 1)  # a column a pixel wide: its chroma's neighbour
def test_a_boxs_pixels_are_exactly_the_full_decodes(name, divisor, fast, mirror, x0, y0, x1,
                                                    y1):
    data = encoded(name)
    width, height = -(-301 // divisor), -(-203 // divisor)
    xs = sorted(min(int(f * width), width - 1) for f in (x0, x1))
    ys = sorted(min(int(f * height), height - 1) for f in (y0, y1))
    box = (xs[0], ys[0], xs[1] + 1, ys[1] + 1)
    old = jpeg_decode.FAST_DCT
    jpeg_decode.FAST_DCT = fast
    try:
        full = jpeg_decode.scaled(data, 301, 203, divisor).permute(1, 2, 0)
        block = jpeg_decode.region(data, 301, 203, divisor, box, mirror)
    finally:
        jpeg_decode.FAST_DCT = old
    expected = full[box[1]:box[3], box[0]:box[2]]
    assert block.is_contiguous()
    assert torch.equal(block, expected.flip(1) if mirror else expected)


@pytest.mark.skipif(jpeg_decode.decoder() != "region", reason="the region decoder is not built")
@pytest.mark.parametrize("subsampling", [2, 1])  # 4:2:0, 4:2:2
def test_the_last_columns_of_every_width_are_the_full_decodes(subsampling):
    # Near the right edge libjpeg-turbo's cropped width decides the upsampler: one chroma
    # sample wide, it takes the plain one (4:2:0 at 16n + 2 px: the last column 47 levels
    # off, before the decoder kept its crop wider). Every width over two iMCUs, every box of
    # the last few columns.
    noise = numpy.random.RandomState(0).randint(0, 256, (18, 50, 3), dtype=numpy.uint8)
    for width in range(17, 51):
        data = jpeg(Image.fromarray(numpy.ascontiguousarray(noise[:, :width])), quality=90,
                    subsampling=subsampling)
        full = jpeg_decode.scaled(data, width, 18, 1).permute(1, 2, 0)
        for left in range(width - 4, width):
            for top, bottom in ((0, 18), (17, 18)):
                box = (left, top, width, bottom)
                block = jpeg_decode.region(data, width, 18, 1, box, False)
                assert torch.equal(block, full[top:bottom, left:width]), (width, box)


@pytest.mark.skipif(jpeg_decode.decoder() != "region", reason="the region decoder is not built")
def test_a_box_outside_the_image_or_a_wrong_scale_is_a_value_error():
    module = jpeg_decode._region_module()
    with pytest.raises(ValueError, match=r"the box \(0, 0, 302, 10\) is not inside the "
                                         r"301x203 image"):
        module.decode(encoded("4:2:0"), 1, 0, 0, 302, 10, True, True)
    with pytest.raises(ValueError, match="reduction must be 1, 2, 4 or 8, not 3"):
        module.decode(encoded("4:2:0"), 3, 0, 0, 10, 10, True, True)


@pytest.mark.skipif(jpeg_decode.decoder() != "region", reason="the region decoder is not built")
def test_other_threads_run_while_a_box_is_decoded():
    # The decode releases the GIL (as simplejpeg's and torchvision's do). A thread counting
    # meanwhile: holding the GIL, the decode lets it count only for a few switch intervals
    # (5 ms each) around the call, whatever the call's length; released, it counts through the
    # call. The bound: a fifth of the rate it counts at while this thread sleeps, over calls
    # of 0.3 s in all (as many as that takes: one took 0.295 s on an idle machine). Measured
    # on this loaded 2-core machine: 0.48 released, 0.03 held.
    import threading
    import time

    noise = numpy.random.RandomState(0).randint(0, 256, (4000, 6000, 3), dtype=numpy.uint8)
    data = jpeg(Image.fromarray(noise), quality=95)
    counted, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            counted[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        before = counted[0]
        time.sleep(0.2)
        rate = (counted[0] - before) / 0.2
        before, start = counted[0], time.perf_counter()
        while time.perf_counter() - start <= 0.3:
            jpeg_decode._region_module().decode(data, 1, 0, 0, 6000, 4000, True, True)
        during, seconds = counted[0] - before, time.perf_counter() - start
    finally:
        stop.set()
        counter.join()
    assert seconds > 0.3 and sys.getswitchinterval() <= 0.005
    assert during > 0.2 * rate * seconds, (during, rate, seconds)


def test_a_jpeg_cut_short_is_an_os_error_whichever_box_is_asked():
    # Cut below the box, the file no longer ends at its End Of Image marker: decoded whole,
    # strictly. Cut and given a marker again, a box above the cut is an error too (the region
    # decoder reads to the marker, jpeg_decode.CHECK_TO_END: until 2026-11 its rows decoded),
    # and a box across the cut, never grey rows.
    data = encoded("4:2:0")
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.region(data[:len(data) // 2], 301, 203, 1, (0, 0, 10, 10), False)
    remarked = data[:len(data) // 2] + b"\xff\xd9"
    for box in ((0, 0, 10, 10), (0, 190, 10, 203)):
        with pytest.raises(OSError, match="cannot decode the JPEG"):
            jpeg_decode.region(remarked, 301, 203, 1, box, False)


def test_bytes_after_the_end_of_image_decode_to_the_same_pixels():
    data = encoded("4:2:0")
    block = jpeg_decode.region(data + b"\0" * 7, 301, 203, 1, (5, 6, 50, 60), True)
    expected = jpeg_decode.scaled(data, 301, 203, 1).permute(1, 2, 0)[6:60, 5:50].flip(1)
    assert torch.equal(block, expected)


def test_images_are_the_same_with_or_without_the_region_decoder(monkeypatch):
    from trainer.data import images

    data = encoded("4:2:0")
    decoded = [images.train_image(data, 64, random.Random(seed)) for seed in range(8)]
    decoded.append(images.eval_image(data, 64))
    monkeypatch.setattr(jpeg_decode, "_region_module", lambda: None)
    again = [images.train_image(data, 64, random.Random(seed)) for seed in range(8)]
    again.append(images.eval_image(data, 64))
    assert all(torch.equal(a, b) for a, b in zip(decoded, again))


def test_without_simplejpeg_torchvision_decodes_and_images_still_come_out(monkeypatch):
    # The xrt image (Python 3.7) has no simplejpeg: its import fails, nothing else does.
    from trainer.data import images

    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # import simplejpeg: ImportError
    for cached in (jpeg_decode.decoder, jpeg_decode._simplejpeg):
        cached.cache_clear()
    try:
        data = jpeg(photo_like(301, 203), quality=85)
        assert jpeg_decode.decoder() == "torchvision"
        assert jpeg_decode.described() == "JPEGs decoded by torchvision"
        assert jpeg_decode.header(data) is None
        image = images.train_image(data, 64, random.Random(0))
        assert image.shape == (3, 64, 64) and image.dtype == torch.uint8
    finally:
        monkeypatch.undo()
        for cached in (jpeg_decode.decoder, jpeg_decode._simplejpeg):
            cached.cache_clear()
    assert jpeg_decode.decoder() in ("region", "simplejpeg")


@pytest.mark.parametrize("mode, kind, expected", [
    ("RGB", "JPEG", (301, 203)), ("L", "JPEG", (301, 203)),
    ("CMYK", "JPEG", None), ("RGB", "PNG", None)])
def test_the_header_sizes_what_simplejpeg_decodes_to_rgb_and_leaves_the_rest(mode, kind,
                                                                           expected):
    buffer = io.BytesIO()
    photo_like(301, 203).convert(mode).save(buffer, kind)
    assert jpeg_decode.header(buffer.getvalue()) == expected


@pytest.mark.parametrize("mode", ["RGB", "L"])
def test_the_scaled_decode_has_pillows_draft_size_and_its_pixels_with_the_accurate_idct(
        mode, monkeypatch):
    data = jpeg(photo_like(301, 203).convert(mode), quality=85)
    for divisor in (1, 2, 4, 8):
        image = Image.open(io.BytesIO(data))
        image.draft("RGB", (301 // divisor, 203 // divisor))
        assert jpeg_decode.scaled(data, 301, 203, divisor).shape == (
            3, image.size[1], image.size[0])
    monkeypatch.setattr(jpeg_decode, "FAST_DCT", False)
    expected = torch.from_numpy(numpy.array(Image.open(io.BytesIO(data)).convert("RGB")))
    assert torch.equal(jpeg_decode.scaled(data, 301, 203, 1), expected.permute(2, 0, 1))


@pytest.mark.parametrize("data", [b"", b"\xff\xd8\xff", b"not a jpeg at all"])
def test_what_simplejpeg_cannot_decode_is_an_os_error(data):
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.scaled(data, 16, 16, 1)


def test_a_jpeg_cut_short_is_an_os_error_not_grey_rows():
    data = jpeg(photo_like(301, 203), quality=85)
    with pytest.raises(OSError, match="cannot decode the JPEG"):
        jpeg_decode.scaled(data[:len(data) // 2], 301, 203, 1)


class _Turbo:
    def __init__(self, version):
        self.LIBJPEG_TURBO_VERSION = version


@pytest.mark.parametrize("version, sampling, reduction, exact", [
    (2001005, ((4, 2), (1, 1), (1, 1)), 2, False),  # libjpeg-turbo 2.1.5's wrong pixels
    (2001005, ((2, 4), (1, 1), (1, 1)), 4, False),
    (2001005, ((4, 2), (1, 1), (1, 1)), 1, True),  # full scale: right
    (2001005, ((2, 2), (1, 1), (1, 1)), 2, True),  # 4:2:0: right
    (3000000, ((4, 2), (1, 1), (1, 1)), 2, True),  # fixed in 3.0.0
])
def test_crops_libjpeg_turbo_gets_wrong_are_decoded_whole(version, sampling, reduction, exact):
    assert jpeg_decode._crops_exactly(_Turbo(version), sampling, reduction) is exact


def test_a_box_outside_the_image_is_a_bug_not_a_fallback():
    data = jpeg_decode._probe()  # 16 x 16
    for box in ((0, 0, 17, 4), (4, 4, 4, 8), (-1, 0, 4, 4), (0, 0, 9, 9)):
        reduction = 2 if box == (0, 0, 9, 9) else 1
        with pytest.raises(RuntimeError, match="is not inside the"):
            jpeg_decode.region(data, 16, 16, reduction, box, False)
