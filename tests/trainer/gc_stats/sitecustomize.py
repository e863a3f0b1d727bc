"""Loaded at start-up by a process that has this folder on PYTHONPATH
(tests/trainer/test_startup.py): each garbage collection it makes is reported on stderr
("gc: collecting generation N...")."""

import gc

gc.set_debug(gc.DEBUG_STATS)
