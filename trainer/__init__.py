"""Trainers run by the launcher on a single XLA device: ``trainer.mnist``, ``trainer.imagenet``."""
