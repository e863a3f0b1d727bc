"""The instruction-set cap ``make test`` runs the numeric tests under is taken by torch_xla's
XLA CPU backend: an unknown flag or value would leave that second run identical to the first,
a check that could never fail."""

import os
import re
import subprocess
import sys

from conftest import REPO

COMPILE_ONE_GRAPH = (
    "import torch, torch_xla; "
    "print(float((torch.ones(64, 64).to(torch_xla.device()) @ torch.ones(64, 64)"
    ".to(torch_xla.device())).sum().cpu()))")


def makefile_cap():
    text = (REPO / "Makefile").read_text()
    return re.search(r"^NUMERIC_ISA_CAP \?= (\S+)$", text, re.M).group(1)


def test_the_xla_cpu_backend_compiles_under_the_makefiles_cap():
    cap = makefile_cap()
    env = dict(os.environ, PJRT_DEVICE="CPU", XLA_FLAGS="--xla_cpu_max_isa=" + cap,
               TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="cpu_compiler=1")
    result = subprocess.run([sys.executable, "-c", COMPILE_ONE_GRAPH], env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(64.0 ** 3)
    assert "Will not use features newer than: " + cap in result.stderr
    assert "Unknown CPU ISA" not in result.stderr
