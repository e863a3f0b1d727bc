"""The run's local working folders in ``$TMPDIR`` (``trainer-outputs-*`` for a ``gs://`` job
dir's metrics and event files, ``trainer-compile-cache-*``), which the run deletes as it ends
however it ends, but a ``kill -9`` cannot. On a reused TPU VM those would pile up run by run,
so each folder is held by its owner with an ``flock`` on a file inside it, which the kernel
releases when the owner dies however it dies; ``folder`` first removes every
``trainer-*`` folder that nobody holds (a folder without the lock file, from a version before
this one or not ours, is left alone)."""

from __future__ import annotations

import fcntl
import glob
import os
import shutil
import sys
import tempfile
from typing import Dict

PREFIX = "trainer-"
_OWNER = ".owner.lock"
_MAKING = ".trainer-making-"
_held: Dict[str, int] = {}  # folder -> the descriptor whose flock holds it

# Folders that a library makes in $TMPDIR as it is imported and deletes in an ``atexit``
# handler, which the trainer's ``os._exit`` skips (``cli.exit_process``): (module, the name
# of its attribute that holds the folder's path). torch.distributed, which torch_xla imports,
# keeps its generated ``_remote_module_non_scriptable.py`` in one: a folder a run, exit 0 too.
_LIBRARY_FOLDERS = (("torch.distributed.nn.jit.instantiator", "INSTANTIATED_TEMPLATE_DIR_PATH"),)


def folder(kind: str) -> str:
    """A new working folder ``$TMPDIR/trainer-KIND-*``, held until ``release``; stale ones
    (their owner gone) are removed first."""
    remove_stale()
    # Made under a name ``remove_stale`` skips, held, then named: another run starting at
    # the same moment never finds it unheld.
    making = tempfile.mkdtemp(prefix=_MAKING)
    owner = os.open(os.path.join(making, _OWNER), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    fcntl.flock(owner, fcntl.LOCK_EX)
    path = os.path.join(os.path.dirname(making), "{}{}-{}".format(
        PREFIX, kind, os.path.basename(making)[len(_MAKING):]))
    os.rename(making, path)
    _held[path] = owner
    return path


def release(path: str) -> None:
    """Delete ``path`` (a ``folder``) and let go of it."""
    shutil.rmtree(path, ignore_errors=True)
    owner = _held.pop(path, None)
    if owner is not None:
        os.close(owner)


def release_all() -> None:
    """``release`` every folder this process holds (a process that ends without its
    owners' cleanup: ``stop_signal``)."""
    for path in list(_held):
        release(path)


def remove_stale() -> None:
    """Delete the working folders in ``$TMPDIR`` whose owner has ended."""
    for path in glob.glob(os.path.join(tempfile.gettempdir(), PREFIX + "*")):
        if path in _held:
            continue
        try:
            owner = os.open(os.path.join(path, _OWNER), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue  # no lock file: not one of these (or being made right now)
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner is alive
        finally:
            os.close(owner)
        shutil.rmtree(path, ignore_errors=True)


def remove_library_folders() -> None:
    """Delete the $TMPDIR folders of the libraries this process imported (``_LIBRARY_FOLDERS``),
    for a process about to end without running ``atexit`` handlers; and torch's compile cache
    folder there (``torchinductor_USER``, made during the run), if it is empty: one that holds
    something is a cache that later runs share, left as it is."""
    for module_name, attribute in _LIBRARY_FOLDERS:
        path = getattr(sys.modules.get(module_name), attribute, None)
        if isinstance(path, str) and path:
            shutil.rmtree(path, ignore_errors=True)
    inductor = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    if inductor is not None:
        try:
            os.rmdir(inductor.default_cache_dir())
        except OSError:  # not there, or not empty
            pass
