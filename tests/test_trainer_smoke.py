"""Placeholder until the trainer issue lands: the MNIST trainer gets the XLA CPU device."""

import subprocess
import sys

import pytest

from conftest import REPO, clean_environ

pytestmark = pytest.mark.xla


def test_mnist_trainer_reports_the_cpu_device():
    result = subprocess.run([sys.executable, "-m", "trainer.mnist"], cwd=str(REPO),
                            env=clean_environ(PJRT_DEVICE="CPU"), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "(CPU)" in result.stdout
