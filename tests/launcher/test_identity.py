"""launcher.identity: the user name and home a process under an arbitrary uid gets."""

import pwd

import pytest

from launcher.identity import home_directory, user_name


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


def test_a_home_that_cannot_be_written_is_replaced_by_the_temporary_directory(tmp_path):
    """docker run --user 1000 sets HOME=/, which that user cannot write (nor anyone, on a
    read-only root filesystem): torch hub's and Hugging Face's caches live under it."""
    home = tmp_path / "home"
    home.mkdir()
    temp = str(tmp_path / "tmp")
    assert home_directory({"HOME": str(home)}, writable=lambda path: False,
                          temp_dir=lambda: temp) == (("HOME", temp),)
    assert home_directory({}, temp_dir=lambda: temp) == (("HOME", temp),)
    assert home_directory({"HOME": str(tmp_path / "absent")},
                          temp_dir=lambda: temp) == (("HOME", temp),)


def test_a_writable_home_is_left_as_it_is(tmp_path):
    assert home_directory({"HOME": str(tmp_path)}) == ()


def test_without_any_writable_directory_home_is_left_alone(tmp_path):
    def no_temp_dir():
        raise FileNotFoundError("No usable temporary directory found")
    assert home_directory({"HOME": "/"}, writable=lambda path: False,
                          temp_dir=no_temp_dir) == ()
