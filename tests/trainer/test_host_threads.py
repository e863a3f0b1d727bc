"""trainer.host_threads: the trainer process's torch pools are what docs/trainers.md says, on a
2-core machine and on the hosts accelerators come with (faked cores), set once by the trainers'
shared ``main`` before anything runs, and logged in one line."""

import re
import subprocess
import sys

import pytest

from conftest import REPO, clean_environ
from trainer import host_threads


def documented_rule():
    """{cores: (intra-op, inter-op)} from the table in docs/trainers.md's "Host threads"."""
    text = (REPO / "docs" / "trainers.md").read_text()
    section = text.split("## Host threads", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([\d,]+) \| [^|]* \| (\d+) \| (\d+) \|$", section, re.M)
    return {int(cores.replace(",", "")): (int(intra), int(inter))
            for cores, intra, inter in rows}


def test_the_docs_give_the_rule_for_a_small_machine_and_the_accelerator_hosts():
    assert {2, 16, 112, 180} <= set(documented_rule())


@pytest.mark.parametrize("cores", [2, 16, 112, 180])
def test_the_pools_are_what_the_docs_say(cores):
    assert tuple(host_threads.choose(cores)) == documented_rule()[cores]


# A host of many cores, faked: the cores the trainer reads are os.sched_getaffinity's, and
# torch's default pool there (one thread per core) is set to 8 before the trainer starts
# (torch caps it at the cores it sees).
ENTRY = """
import os, torch
os.sched_getaffinity = lambda pid: set(range({cores}))
torch.set_num_threads(8)
from trainer import cli, mnist
cli.run_main(mnist.define_flags, lambda config, paths: print(
    "pools", torch.get_num_threads(), torch.get_num_interop_threads()),
    ["mnist", "--fake_data"])
"""


@pytest.mark.parametrize("cores", [2, 180])
def test_the_trainers_main_sizes_the_pools_once_before_the_run_and_logs_it(cores):
    done = subprocess.run([sys.executable, "-c", ENTRY.format(cores=cores)], cwd=str(REPO),
                          env=clean_environ(PJRT_DEVICE="CPU"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout
    intra, inter = documented_rule()[cores]
    assert "pools {} {}".format(intra, inter) in done.stdout
    [line] = [line for line in done.stdout.splitlines() if "host threads:" in line]
    assert line.endswith(
        "host threads: the trainer process's torch pools at {} intra-op and {} inter-op "
        "(torch's default here: 8 of {} cores); data workers 1 each; the model's compute "
        "runs in XLA's own CPU thread pool".format(intra, inter, cores))
