"""A PID namespace as a container has one (``unshare --pid --fork``): the host PID of the
process that is PID 1 in it, for the tests that send it a container's signals."""

import time


def namespace_init_pid(unshare_pid, timeout=10.0):
    """The host PID of the process that is PID 1 inside unshare's new namespace."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/{0}/task/{0}/children".format(unshare_pid)) as handle:
                children = handle.read().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        time.sleep(0.02)
    raise AssertionError("unshare started no child")
