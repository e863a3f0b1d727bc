"""trainer.data.jpeg_limits: a JPEG's frame and scans read from its markers, and the files a
worker refuses before any decoder runs: too many scans, more decoder memory than its budget.
The limits admit ImageNet's largest photographs (near 100 megapixels)."""

import io
import random
import subprocess
import sys

import damaged_jpegs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from conftest import REPO, clean_environ
from trainer.data import images, jpeg_limits

SOF_SIZE_OFFSET = 5  # after the marker: length (2), precision (1), then height and width


def encoded(mode="RGB", size=(64, 48), **options):
    buffer = io.BytesIO()
    Image.new(mode, size, (10, 20, 30) if mode == "RGB" else 40).save(buffer, "JPEG", **options)
    return buffer.getvalue()


def with_frame_size(data, width, height):
    """``data`` with its frame header claiming ``width x height`` (its scans unchanged)."""
    data = bytearray(data)
    frame = next(at for at in range(len(data) - 1)
                 if data[at] == 0xFF and data[at + 1] in (0xC0, 0xC2))
    data[frame + SOF_SIZE_OFFSET:frame + SOF_SIZE_OFFSET + 4] = (
        height.to_bytes(2, "big") + width.to_bytes(2, "big"))
    return bytes(data)


@pytest.mark.parametrize("options, progressive, sampling", [
    ({"subsampling": 2}, False, ((2, 2), (1, 1), (1, 1))),
    ({"subsampling": 0, "progressive": True}, True, ((1, 1),) * 3),
    ({"subsampling": 1}, False, ((2, 1), (1, 1), (1, 1)))])
def test_the_frame_is_read_from_the_markers(options, progressive, sampling):
    found = jpeg_limits.layout(encoded(**options))
    assert (found.width, found.height, found.precision) == (64, 48, 8)
    assert (found.progressive, found.sampling) == (progressive, sampling)
    assert (found.scans > 1) == progressive and found.scans >= 1
    assert jpeg_limits.problem(found) is None


def test_what_is_not_a_jpeg_has_no_layout():
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "PNG")
    for data in (buffer.getvalue(), b"", b"\xff\xd8", encoded()[:20]):
        assert jpeg_limits.layout(data) is None


def test_an_exif_thumbnails_scan_is_not_counted():
    thumbnail = encoded(size=(16, 16))
    exif = Image.Exif()
    exif[0x010E] = "x"
    data = bytearray(encoded())
    # An APP1 segment holding a whole JPEG (as a camera's thumbnail) right after SOI.
    payload = b"Exif\x00\x00" + bytes(exif.tobytes()) + thumbnail
    data[2:2] = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    assert jpeg_limits.layout(bytes(data)).scans == 1


def test_a_scan_bomb_is_refused_before_any_decode():
    """883 scans of a valid 158 KB progressive file took 14 s in every decoder; a file whose
    markers show more than MAX_SCANS is damaged, decided from its markers."""
    bomb = damaged_jpegs.scan_bomb()  # its first scans again: decoders would redo each
    found = jpeg_limits.layout(bomb)
    assert found.scans > jpeg_limits.MAX_SCANS
    assert "scans, more than the 100 a worker decodes" in jpeg_limits.problem(found)
    with pytest.raises(images.DamagedImage, match="scans, more than the 100"):
        images.eval_image(bomb, 32, "bomb.jpg")


def test_a_progressive_memory_bomb_is_refused_and_imagenets_largest_are_not():
    """A 781 KB DC-only progressive 20000 x 20000 file took 774 MB in one worker."""
    small = encoded(progressive=True, subsampling=2)
    bomb = with_frame_size(small, 20000, 20000)
    assert "needs 1144 MiB to decode" in jpeg_limits.problem(jpeg_limits.layout(bomb))
    with pytest.raises(images.DamagedImage, match="more than the 512 MiB a worker allows"):
        images.train_image(bomb, 32, random.Random(0), "bomb.jpg")
    # ImageNet-1k's largest photographs are near 100 megapixels: progressive 4:2:0 at that
    # size takes 286 MiB, baseline no coefficient buffer at all.
    for data in (with_frame_size(small, 12000, 8000),
                 with_frame_size(encoded(subsampling=0), 12000, 8000)):
        assert jpeg_limits.problem(jpeg_limits.layout(data)) is None


@given(st.binary(max_size=64), st.integers(0, 200))
def test_any_bytes_give_a_layout_or_none_never_an_error(tail, cut):
    data = encoded()[:cut] + tail
    found = jpeg_limits.layout(data)
    assert found is None or isinstance(jpeg_limits.problem(found), (str, type(None)))


# What a worker's decode of one image may add to its peak memory, measured in a child process
# that holds only the file's bytes: the decode budget (libjpeg's max_memory_to_use and the
# markers' estimate both stop at it) and the decoded image at the reduced scale, a few MB.
_DECODE_PEAK = '''
import io, random, re, sys
from PIL import Image
from trainer.data import images

def kib(key):
    return int(re.search(key + r":\\s+(\\d+)", open("/proc/self/status").read()).group(1))

data = open(sys.argv[1], "rb").read()
small = io.BytesIO()
Image.new("RGB", (64, 48)).save(small, "JPEG", progressive=True)
images.train_image(small.getvalue(), 32, random.Random(0), "warm.jpg")  # the decoders loaded
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # the peak (VmHWM) starts again from what the process holds now
before = kib("VmRSS")
for seed in range(3):
    images.train_image(data, 224, random.Random(seed), "big.jpg")
images.eval_image(data, 224, "big.jpg")
images.verify(data, "big.jpg")
print((kib("VmHWM") - before) * 1024)
'''


@pytest.mark.parametrize("progressive", [False, True])
def test_a_100_megapixel_photograph_decodes_within_the_budget(progressive, tmp_path):
    """ImageNet-1k's largest photographs are near 100 megapixels: one of 12000 x 8000
    decodes for training, evaluation and make_shards's check, baseline and progressive
    (274 MiB of coefficients, under libjpeg's 512 MiB max_memory_to_use), and adds at most
    the budget to the decoding process's peak memory (Linux's VmHWM, reset after a small
    image's decode has loaded the decoders)."""
    picture = Image.linear_gradient("L").resize((12000, 8000)).convert("RGB")
    path = tmp_path / "big.jpg"
    picture.save(str(path), "JPEG", quality=75, progressive=progressive)
    found = jpeg_limits.layout(path.read_bytes())
    assert found.width * found.height == 96 * 10 ** 6 and jpeg_limits.problem(found) is None
    child = subprocess.run([sys.executable, "-c", _DECODE_PEAK, str(path)],
                           capture_output=True, text=True, timeout=300,
                           env=clean_environ(PJRT_DEVICE="CPU"), cwd=str(REPO))
    assert child.returncode == 0, child.stderr[-2000:]
    added = int(child.stdout.split()[-1])
    # Baseline: no coefficient buffer; progressive: 274 MiB of them (measured: 11 and 280).
    assert added <= jpeg_limits.DECODE_BUDGET
    if progressive:
        assert added >= found.coefficient_bytes() // 2  # the figure is the decode's
