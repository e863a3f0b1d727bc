"""``python jpeg_region.py SOURCE OUT_DIR [--bundle] [--strict]``: builds the data workers'
cropped JPEG decoder (``trainer/data/_jpeg_region.c``) for this interpreter, into ``OUT_DIR``.

One build path for both places that build it: the pjrt image's build stage (the Dockerfile,
``--bundle``) and the dev environment (``make venv``, ``--strict``). It compiles with the C
compiler this Python was built with (``sysconfig``'s ``CC``) against the system's
libjpeg-turbo (``libjpeg62-turbo-dev``: its ``jpeglib.h`` and ``libjpeg.so``), with
``$ORIGIN`` as the run path (RPATH). ``--bundle`` copies the ``libjpeg.so.62`` it linked
against next to the module, so the image's final stage needs no Debian package of its own
(Debian's ``libjpeg.a`` is not position independent, so the library cannot be linked in
statically).

Runs with the image's own Python and only its standard library. Exit codes: 0 built, 1 the
compiler failed (its output above the line), 64 usage, 69 no compiler or no ``jpeglib.h``
(the hint names the Debian packages).
"""

import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

MODULE = "_jpeg_region"
PACKAGES = "gcc libc6-dev libjpeg62-turbo-dev"


def fail(message: str, hint: str, code: int) -> None:
    print("jpeg_region: {} (hint: {})".format(message, hint), file=sys.stderr)
    sys.exit(code)


def compiler() -> list:
    """The C compiler this Python was built with (its first word on PATH), else ``cc``."""
    words = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if shutil.which(words[0]) is None:
        words = ["cc"]
    if shutil.which(words[0]) is None:
        fail("no C compiler on PATH", "apt-get install {}".format(PACKAGES), 69)
    return words


def linked_libjpeg(module: str) -> str:
    """The path of the libjpeg.so.62 ``module`` resolves to, by ``ldd``."""
    listing = subprocess.run(["ldd", module], stdout=subprocess.PIPE, universal_newlines=True,
                             check=True).stdout
    for line in listing.splitlines():
        name, _, rest = line.strip().partition(" => ")
        if name.startswith("libjpeg.so") and rest:
            return rest.split()[0]
    fail("{} links no libjpeg.so".format(module), "see ldd's output", 1)
    return ""


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("out_dir")
    parser.add_argument("--bundle", action="store_true",
                        help="copy the libjpeg.so.62 it links against next to the module")
    parser.add_argument("--sanitize", action="store_true",
                        help="built with AddressSanitizer and UBSan, for tests/"
                             "sanitized_jpeg_region.py (make fuzz); never for the image")
    parser.add_argument("--strict", action="store_true",
                        help="warnings are errors (make venv; not the image, whose compiler "
                             "is the base release's)")
    args = parser.parse_args(argv)
    include = sysconfig.get_paths()["include"]
    cc = compiler()
    if not any(os.path.exists(os.path.join(directory, "jpeglib.h"))
               for directory in ["/usr/include", "/usr/local/include"]):
        fail("no jpeglib.h", "apt-get install {}".format(PACKAGES), 69)
    os.makedirs(args.out_dir, exist_ok=True)
    module = os.path.join(args.out_dir, MODULE + sysconfig.get_config_var("EXT_SUFFIX"))
    # Every build of another Python's suffix stays (the dev tree may hold several); this one's
    # is replaced whole, never half-written (the compiler writes a temporary file first).
    partial = module + ".partial"
    sanitizers = (["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                   "-fno-omit-frame-pointer", "-g"] if args.sanitize else [])
    command = cc + ["-O2", "-fPIC", "-shared", "-Wall"] + sanitizers + (
        ["-Werror"] if args.strict else []) + [
        "-I" + include, args.source, "-o", partial,
        # RPATH, not RUNPATH: the copy beside the module wins over LD_LIBRARY_PATH.
        "-ljpeg", "-Wl,-rpath,$ORIGIN", "-Wl,--disable-new-dtags"]
    if subprocess.run(command).returncode != 0:
        fail("the compiler failed: {}".format(" ".join(command)),
             "the output above; the packages are {}".format(PACKAGES), 1)
    os.replace(partial, module)
    if args.bundle:
        library = linked_libjpeg(module)
        shutil.copy2(library, os.path.join(args.out_dir, "libjpeg.so.62"))
    for stale in glob.glob(os.path.join(args.out_dir, "*.partial")):
        os.remove(stale)
    print("jpeg_region: built {}{}".format(
        module, " with {}".format(os.path.basename(linked_libjpeg(module))) if args.bundle
        else ""))


if __name__ == "__main__":
    main()
