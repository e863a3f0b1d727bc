"""A persistent compilation cache kept with the job, so that a restarted replica, a resumed
job and every tuning trial load the compiled programs instead of compiling them again.

It is torch_xla's own cache (``torch_xla.runtime.initialize_cache``), one file per compiled
program, in a folder per runtime (``xla.runtime_name()``: other versions' or devices' entries
are never offered to this one):

- where: ``--compile_cache=LOCATION`` (local or gs://; one location can serve many trials),
  by default ``compile-cache/`` in the job dir (``--job_dir``, else ``AIP_CHECKPOINT_DIR``);
  ``--compile_cache=none`` turns it off;
- a gs:// cache is synced down before anything compiles and up after the first epoch (when
  every graph of the run exists) and at the end; a local one is used in place;
- entries that cannot be loaded (corrupt, truncated) are compiled again and replaced, with one
  warning; a cache that cannot be read or written is a warning, never a failed run;
- on a slice of several hosts every host reads the cache and only the one that writes the
  job's outputs (``devices.Topology.writes_outputs``) writes it (torch_xla's ``readonly``).

By default the cache is left off on the XLA CPU device, whose runtime (torch_xla 2.9) writes
entries but cannot load them back; an explicit ``--compile_cache`` is used there too. torch_xla
1.x has no persistent cache: the run says so and compiles as before.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

from trainer import scratch, xla
from trainer.errors import StorageError
from trainer.outputs import OutputPaths
from trainer.storage import Directory, open_dir

DEFAULT_FOLDER = "compile-cache"
OFF = "none"
log = logging.getLogger("trainer")


class CompileCache:
    """The cache of one run; every method is safe to call when it is off."""

    def __init__(self, directory: Optional[Directory] = None, writes: bool = True) -> None:
        self.directory, self.writes = directory, writes
        self.namespace = xla.runtime_name()
        self.entries_at_start = 0
        self.saved = 0
        self._local: Optional[str] = None
        self._scratch: Optional[str] = None  # where a remote cache's local copy goes
        self._warned = False

    @classmethod
    def for_run(cls, setting: str, paths: OutputPaths, writes: bool = True) -> "CompileCache":
        """The cache that ``--compile_cache`` (``setting``) and the job's paths ask for,
        started (synced down, and handed to torch_xla); call it before anything compiles.
        ``writes``: whether this process adds entries (False: it only reads them)."""
        location = setting or paths.compile_cache_dir
        if not location or location == OFF:
            return cls()
        if not xla.persistent_cache_available():
            log.info("compile cache: torch_xla %s has no persistent cache; not used",
                     xla.torch_xla_version())
            return cls()
        if not setting and not xla.loads_cached_programs():
            log.info("compile cache: off on this device: its runtime writes compiled programs "
                     "but cannot load them back, so a cache would only cost time here (on a "
                     "TPU it is on by default)")
            return cls()
        cache = cls(open_dir(location), writes)
        cache._start()
        return cache

    def _start(self) -> None:
        directory = self.directory
        try:
            # A remote cache's local copy is per process; a local cache is used in place (and
            # the scratch folder stays empty).
            self._scratch = scratch.folder("compile-cache")
            self._local = directory.staging_path(self.namespace, self._scratch)
            os.makedirs(self._local, exist_ok=True)
            self.entries_at_start = directory.sync_down(self.namespace, self._local)
        except (StorageError, OSError) as error:
            self._give_up("cannot be read", error)
            return
        if not xla.use_persistent_cache(self._local, readonly=not self.writes):
            log.warning("compile cache: this process has compiled before; %s not used",
                        directory.join(self.namespace))
            self.directory = None
            return
        log.info("compile cache: %s (%d entries)", directory.join(self.namespace),
                 self.entries_at_start)

    def save(self) -> None:
        """Make the entries compiled so far durable in the cache location, and warn once
        about entries that could not be loaded."""
        if self.directory is None:
            return
        loaded, unusable = xla.cache_counts()
        if unusable and not self._warned:
            self._warned = True
            log.warning("compile cache: %d of %d entries in %s could not be loaded (corrupt, "
                        "or this runtime cannot load compiled programs); compiled again and "
                        "replaced", unusable, loaded + unusable,
                        self.directory.join(self.namespace))
        if not self.writes:
            return
        try:
            self.saved += self.directory.sync_up(self._local, self.namespace)
        except (StorageError, OSError) as error:
            self._give_up("cannot be written", error)

    def release(self) -> None:
        """Delete the scratch folder, with the local copy of a remote cache (call ``save``
        first to keep its new entries). torch_xla may go on compiling in this process: it
        skips writing entries to a folder that is gone."""
        if self._scratch is not None:
            scratch.release(self._scratch)
            self._scratch = None

    def __enter__(self) -> "CompileCache":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()

    def report(self) -> Optional[Dict[str, Any]]:
        """The cache's figures for summary.json (None when it was off)."""
        if self.directory is None:
            return None
        loaded, unusable = xla.cache_counts()
        return {"location": self.directory.join(self.namespace),
                "entries_at_start": self.entries_at_start, "loaded": loaded,
                "unusable": unusable, "saved": self.saved}

    def _give_up(self, what: str, error: Exception) -> None:
        log.warning("compile cache: %s %s (%s); training goes on without it",
                    self.directory.join(self.namespace), what,
                    getattr(error, "message", None) or error)
        self.directory = None

