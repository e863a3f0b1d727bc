"""launcher.init: when an init runs the command, which one, and what it is told."""

import os
import stat

import pytest

from launcher.errors import EX_CANNOT_EXECUTE, EX_NOT_FOUND, TrainerExecError
from launcher.init import check_executable, find_init, plan_handover, with_handover

DUMB_INIT = "/venv/bin/dumb-init"
USER = ("python", "train.py", "--lr=0.1")


@pytest.mark.parametrize("mode, prefix", [
    ("group", (DUMB_INIT, "--")),
    ("child", (DUMB_INIT, "--single-child", "--")),
    ("exec", ()),
])
def test_pid1_runs_a_users_command_under_the_init_unless_told_to_exec(mode, prefix):
    handover = plan_handover(mode, is_pid1=True, bundled=False, init_path=DUMB_INIT)
    assert with_handover(handover, USER) == prefix + USER
    assert handover.note and not handover.warning


@pytest.mark.parametrize("is_pid1, bundled", [(False, False), (False, True), (True, True)])
@pytest.mark.parametrize("mode", ["group", "child", "exec"])
def test_exec_when_an_init_runs_already_or_the_trainer_is_ours(mode, is_pid1, bundled):
    handover = plan_handover(mode, is_pid1=is_pid1, bundled=bundled, init_path=DUMB_INIT)
    assert with_handover(handover, USER) == USER and not handover.warning


def test_no_init_installed_is_said_not_silent():
    handover = plan_handover("group", is_pid1=True, bundled=False, init_path=None)
    assert handover.prefix == ()
    assert "no dumb-init" in handover.warning and "SIGTERM" in handover.warning


def test_find_init_prefers_the_one_beside_the_interpreter(tmp_path):
    # The dev venv has dumb-init next to its python (requirements/dev.lock), as the images do.
    assert find_init({"PATH": str(tmp_path)}) is not None
    assert os.path.basename(find_init({"PATH": ""})) == "dumb-init"


def test_check_executable(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(TrainerExecError) as error:
        check_executable(str(script), {"PATH": ""})
    assert error.value.exit_code == EX_CANNOT_EXECUTE
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    check_executable(str(script), {"PATH": ""})
    check_executable("train.sh", {"PATH": str(tmp_path)})
    for missing in ("no-such-program", str(tmp_path / "absent")):
        with pytest.raises(TrainerExecError) as error:
            check_executable(missing, {"PATH": str(tmp_path)})
        assert error.value.exit_code == EX_NOT_FOUND
    with pytest.raises(TrainerExecError):  # a directory is not a program
        check_executable(str(tmp_path), {"PATH": ""})
