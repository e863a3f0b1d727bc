"""launcher.init: when an init runs the command, which one, and what it is told."""

import os
import re

import pytest

from conftest import REPO
from launcher.init import find_init, plan_handover, with_handover
from launcher.launch import SELF_HANDLING_TRAINERS, is_bundled_trainer

DUMB_INIT = "/venv/bin/dumb-init"
USER = ("python", "train.py", "--lr=0.1")


@pytest.mark.parametrize("is_pid1", [True, False])
@pytest.mark.parametrize("mode, prefix", [
    ("group", (DUMB_INIT, "--")),
    ("child", (DUMB_INIT, "--single-child", "--")),
    ("exec", ()),
])
def test_a_users_command_runs_under_the_init_unless_told_to_exec(mode, prefix, is_pid1):
    """Not PID 1 too: the init in front (tini without -g) signals the launcher's process
    alone, which would leave a wrapper's children unaware of the SIGTERM."""
    handover = plan_handover(mode, is_pid1=is_pid1, bundled=False, init_path=DUMB_INIT)
    assert with_handover(handover, USER) == prefix + USER
    assert handover.note and not handover.warning
    assert ("(PID 1)" in handover.note) == (is_pid1 and mode != "exec")


@pytest.mark.parametrize("is_pid1", [True, False])
@pytest.mark.parametrize("mode", ["group", "child", "exec"])
def test_the_bundled_trainers_are_always_execd(mode, is_pid1):
    handover = plan_handover(mode, is_pid1=is_pid1, bundled=True, init_path=DUMB_INIT)
    assert with_handover(handover, USER) == USER and not handover.warning


@pytest.mark.parametrize("command, bundled", [
    (("/venv/bin/python", "-m", "trainer.mnist", "--lr=1"), True),
    (("python3.7", "-m", "trainer.imagenet"), True),
    (("python", "-m", "trainer.lm"), True),
    # The data tools install no handler: blocked or exec'd as PID 1, SIGTERM would not end them.
    (("/venv/bin/python", "-m", "trainer.data.make_shards", "--source=a"), False),
    (("python", "-m", "trainer.data.reindex"), False),
    (("python", "-m", "trainer.data.plan"), False),
    (("python", "-m", "trainer.mnistx"), False),
    (("python", "trainer/mnist.py"), False),
    (("bash", "-m", "trainer.mnist"), False),
])
def test_only_the_trainers_that_catch_sigterm_first_count_as_bundled(command, bundled):
    assert is_bundled_trainer(command) == bundled


@pytest.mark.parametrize("is_pid1, consequence", [(True, "SIGTERM"), (False, "children")])
def test_no_init_installed_is_said_not_silent(is_pid1, consequence):
    handover = plan_handover("group", is_pid1=is_pid1, bundled=False, init_path=None)
    assert handover.prefix == ()
    assert "no dumb-init" in handover.warning and consequence in handover.warning


def test_find_init_prefers_the_one_beside_the_interpreter(tmp_path):
    # The dev venv has dumb-init next to its python (requirements/dev.lock), as the images do.
    assert find_init({"PATH": str(tmp_path)}) is not None
    assert os.path.basename(find_init({"PATH": ""})) == "dumb-init"


def test_the_self_handling_trainers_are_the_modules_that_catch_sigterm_first():
    """The list the launcher holds SIGTERM blocked for must follow the code: a module that
    stops calling catch_sigterm would keep it blocked for good, a new one would be under the
    init."""
    # The modules run as ``python -m`` whose main block catches SIGTERM before anything else
    # (trainer.train catches it in the call, in the user's script: not launcher's to know).
    first_in_main = re.compile(r'if __name__ == "__main__":\n(?:\s*#.*\n)*'
                               r'\s*stop_signal\.catch_sigterm\(\)')
    # A package's __main__ runs as the package (python -m trainer.lm).
    catching = {".".join(path.relative_to(REPO).with_suffix("").parts).replace(".__main__", "")
                for path in (REPO / "trainer").rglob("*.py")
                if first_in_main.search(path.read_text())}
    assert catching == set(SELF_HANDLING_TRAINERS)
