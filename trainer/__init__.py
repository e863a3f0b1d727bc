"""Trainers run by the launcher on every XLA device of the job, as one SPMD program:
``trainer.mnist``, ``trainer.imagenet``."""
