"""launcher.launch: what the trainer's environment gets beyond the runtime's variables."""

import pwd

import pytest

from launcher.launch import user_name


def unknown_uid():
    """A uid with no entry in this machine's password database."""
    uid = 4242
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def test_a_uid_without_a_name_gets_one_for_torchs_getuser():
    """docker run --user 1000 (a pod's runAsUser) with no /etc/passwd entry: torch's import
    called getpass.getuser(), which raised KeyError, a traceback before the trainer's first
    line."""
    uid = unknown_uid()
    assert user_name({}, uid) == (("USER", "uid{}".format(uid)),)


@pytest.mark.parametrize("environ, uid", [
    ({"USER": "me"}, None), ({"LOGNAME": "me"}, None), ({}, 0)])
def test_a_name_the_process_has_is_left_as_it_is(environ, uid):
    assert user_name(environ, unknown_uid() if uid is None else uid) == ()
