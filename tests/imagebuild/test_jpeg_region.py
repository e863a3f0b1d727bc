"""imagebuild/jpeg_region.py: the region JPEG decoder built for this Python, with the
libjpeg-turbo it links against copied next to it (the pjrt image's build stage), and one line
with its exit code when it cannot be built."""

import os
import subprocess
import sys

import pytest

from conftest import REGION_DECODER_BUILDABLE, REPO

SCRIPT = REPO / "imagebuild" / "jpeg_region.py"
SOURCE = REPO / "trainer" / "data" / "_jpeg_region.c"


def build(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT)] + [str(arg) for arg in args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env)


@pytest.mark.skipif(not REGION_DECODER_BUILDABLE, reason="no C compiler or jpeglib.h here")
def test_bundled_the_module_loads_the_libjpeg_next_to_it(tmp_path):
    result = build(SOURCE, tmp_path, "--bundle")
    assert result.returncode == 0, result.stderr
    [module] = tmp_path.glob("_jpeg_region.*.so")
    assert result.stdout.strip() == "jpeg_region: built {} with libjpeg.so.62".format(module)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [module.name, "libjpeg.so.62"])
    # The run path is $ORIGIN, as RPATH: the copy beside it is the one the loader takes,
    # also where LD_LIBRARY_PATH names the system's.
    listing = subprocess.run(["ldd", str(module)], stdout=subprocess.PIPE,
                             universal_newlines=True, check=True,
                             env=dict(os.environ, LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu")
                             ).stdout
    assert "libjpeg.so.62 => {}".format(tmp_path / "libjpeg.so.62") in listing
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "import _jpeg_region; print(_jpeg_region.LIBJPEG_TURBO_VERSION)", str(tmp_path)],
        stdout=subprocess.PIPE, universal_newlines=True, check=True)
    assert int(loaded.stdout) >= 1005000  # jpeg_crop_scanline came in libjpeg-turbo 1.5


def test_without_a_compiler_it_says_which_packages_in_one_line(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    result = build(SOURCE, tmp_path / "out", env=dict(os.environ, PATH=str(empty)))
    assert result.returncode == 69
    assert result.stderr == ("jpeg_region: no C compiler on PATH (hint: apt-get install gcc "
                             "libc6-dev libjpeg62-turbo-dev)\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(not REGION_DECODER_BUILDABLE, reason="no C compiler or jpeglib.h here")
def test_a_compile_error_fails_and_leaves_no_module_behind(tmp_path):
    broken = tmp_path / "broken.c"
    broken.write_text("this is not C\n")
    result = build(broken, tmp_path / "out")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1].startswith("jpeg_region: the compiler failed: ")
    assert list((tmp_path / "out").iterdir()) == []
