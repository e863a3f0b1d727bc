"""``--profile_steps=FIRST,COUNT``: a profile of training steps FIRST to FIRST+COUNT-1 (numbered
as the progress lines number them, from 1), captured by torch_xla's profiler into
``JOB_DIR/tensorboard/plugins/profile/RUN/HOST.xplane.pb``, where TensorBoard's profile
plugin and xprof find it. Each captured step is annotated (torch_xla's ``StepTrace``), so
the tools show per-step times. For a ``gs://`` job dir the profile is written to the run's
local TensorBoard folder and uploaded with it (``RunOutputs.flush``).

Refused at start (exit 64) where it cannot work: torch_xla without an in-process profiler
(the xrt image's 1.11), or a run with no TensorBoard folder (no job dir). A run that resumes
past FIRST, or ends before it, captures nothing and says so; one stopped inside the window
(SIGTERM, Ctrl-C) writes the steps it captured, since its resumed run starts past them.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Optional, Tuple

from trainer import xla
from trainer.errors import EX_USAGE, TrainerError

log = logging.getLogger("trainer")


class ProfileWindow:
    """Captures steps ``first`` to ``first + count - 1`` into ``folder``; ``flush()`` makes
    the written profile durable (uploads it with the TensorBoard files)."""

    def __init__(self, steps: Tuple[int, int], folder: str, flush: Callable[[], None],
                 uri: str = "") -> None:
        """``folder``: a local folder; ``uri``: where it ends up (for the log)."""
        self.first, self.count = steps
        self.folder, self.flush, self.uri = folder, flush, uri or folder
        self.started = self.finished = False
        self.last = 0  # the last step annotated

    @classmethod
    def for_run(cls, steps: Optional[Tuple[int, int]], tensorboard_dir: Optional[str],
                folder: Optional[str], flush: Callable[[], None]
                ) -> Optional["ProfileWindow"]:
        """The window ``--profile_steps`` asks for in the run whose TensorBoard files go to
        ``tensorboard_dir``, written locally in ``folder``: None when the flag is not set,
        or on a host that writes no outputs (the one that does profiles); a usage
        error, the same on every host, where no profile can be written."""
        if steps is None:
            return None
        if not xla.profiler_available():
            raise TrainerError(
                "--profile_steps needs torch_xla's in-process profiler (torch_xla 2.x); this "
                "is torch_xla {}".format(xla.torch_xla_version()),
                "run without --profile_steps on this image, or profile on the pjrt image")
        if tensorboard_dir is None:
            raise TrainerError("--profile_steps needs a TensorBoard folder to write the "
                               "profile to, and this run has none",
                               "pass --job_dir (the profile goes to JOB_DIR/tensorboard/)",
                               EX_USAGE)
        if folder is None:
            return None
        return cls(steps, folder, flush, tensorboard_dir)

    def step_context(self, global_step: int) -> Any:
        """The context the step after ``global_step`` steps runs in: annotated while the
        window captures, which starts before step ``first`` and stops after the last."""
        number = global_step + 1
        if self.finished or not self.first <= number < self.first + self.count:
            return contextlib.nullcontext()
        if not self.started:
            log.info("profiling steps %d to %d", self.first, self.first + self.count - 1)
            xla.start_profile(self.folder)
            self.started = True
        self.last = number
        if number == self.first + self.count - 1:
            return self._last_step(number)
        return xla.step_annotation(number)

    @contextlib.contextmanager
    def _last_step(self, number: int) -> Any:
        with xla.step_annotation(number):
            yield
        self.stop()

    def stop(self) -> None:
        """End the capture (once the captured steps have run, or the run stopped within the
        window) and write the profile; a run that never reached the window says so."""
        if self.finished:
            return
        self.finished = True
        if not self.started:
            log.warning("no profile: step %d never ran in this run (--profile_steps)",
                        self.first)
            return
        xla.wait()  # the captured steps' device work ends inside the capture
        xla.stop_profile()
        self.flush()
        log.info("profile of steps %d to %d%s in %s/plugins/profile/", self.first, self.last,
                 "" if self.last == self.first + self.count - 1 else " (stopped early)",
                 self.uri.rstrip("/"))
