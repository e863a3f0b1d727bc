"""The guide's example (docs/own-code.md, files in docs/examples/own-code/) built on the pjrt
image and rehearsed by running the page's own block as it stands, twice (as a reader pasting
it again; a container left from an interrupted paste is in the way at first): 4 XLA CPU
devices, `docker stop` once the script trains leaves a checkpoint in a fresh folder, and the
next run resumes from it."""

import os
import re
import shutil
import subprocess

from conftest import REPO, clean_environ
from containers import DOCKER, docker
from doc_blocks import block_containing, checked

EXAMPLE = REPO / "docs" / "examples" / "own-code"
REHEARSAL = "docker logs -f rehearsal"


def assignment(block, name):
    """The value the block gives ``name`` (``NAME=value`` on a line of its own)."""
    return re.search(r"^{}=(\S+)$".format(name), block.text, re.MULTILINE).group(1)


def test_the_guides_rehearsal_block_checkpoints_on_docker_stop_and_resumes(images, tmp_path):
    block = block_containing(REHEARSAL)
    base, image = assignment(block, "BASE"), assignment(block, "IMAGE")
    # The reader's checkout, as far as the block uses it: the example's folder.
    shutil.copytree(str(EXAMPLE), str(tmp_path / "docs" / "examples" / "own-code"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(shutil.which(DOCKER), str(bin_dir / "docker"))  # the session's engine client
    docker("tag", images["pjrt"], base)  # the project's image under the name the page uses
    # A run killed half-way left one behind: the block removes it itself.
    docker("run", "-d", "--name", "rehearsal", "--network", "none", "--entrypoint", "sleep",
           base, "600")
    results = []
    try:
        for _ in range(2):  # a reader pastes the block again: it must run again as written
            results.append(subprocess.run(
                ["bash", "-c", checked(block.text)], cwd=str(tmp_path), capture_output=True,
                text=True, timeout=900,
                env=clean_environ(PATH=str(bin_dir) + os.pathsep + os.environ["PATH"])))
            if results[-1].returncode != 0:
                break
    finally:
        docker("rm", "-f", "rehearsal", check=False)
        docker("rmi", image, base, check=False)
    folders = sorted((tmp_path / "runs").glob("own-code-ckpt-*"))
    assert len(folders) == len(results) == 2, [r.stdout + r.stderr for r in results]
    for result, ckpt in zip(results, folders):
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"^exit 143$", result.stdout, re.MULTILINE), result.stdout  # SIGTERM
        # Once for the stopped run (docker logs -f), once for the resumed one: the page's
        # `docker logs rehearsal | tail -1` printed every stderr line again (the pipe takes
        # stdout only).
        assert result.stderr.count("launcher: hand-over: dumb-init (PID 1) runs the command") \
            == 2, result.stderr
        stopped = re.search(r"^stopped by SIGTERM at step (\d+): checkpoint saved$",
                            result.stdout, re.MULTILINE)
        assert stopped, result.stdout + result.stderr
        step = int(stopped.group(1))
        assert (ckpt / "checkpoint.pt").is_file() and not (ckpt / "checkpoint.pt.tmp").exists()
        assert "resumed from step {}".format(step) in result.stdout
        assert "done at step {}".format(max(step, 200)) in result.stdout
