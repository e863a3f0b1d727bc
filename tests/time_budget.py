"""Each pytest tier's time budget for one test, and the warning for a test over it.

``make test`` must stay within its budget (docs/tests.md: 35 minutes warm on 2 cores), and a
suite grows one slow test at a time. So every test is held to its tier's budget (setup, call
and teardown, wall seconds): one over it is named at the end of the session with its time,
as a warning, not a failure (a loaded machine must not fail a correct test). Whoever adds it
sees the cost, and docs/tests.md says what each tier spends.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import DefaultDict, Dict, List, Tuple

# Wall seconds a test of each tier may take on an idle 2-core machine, its process starts and
# compiles included (docs/tests.md, "Time budget").
BUDGET_S: Dict[str, float] = {
    "launcher": 30.0,  # tests/launcher, tests/delivery, tests/imagebuild
    "trainer": 60.0,  # tests/trainer on one XLA CPU device
    "spmd": 90.0,  # tests/trainer on 4 XLA CPU devices
    "numeric": 120.0,  # the numeric tests again under the instruction-set cap
    "containers": 180.0,  # tests/images: real containers
}

_spent: DefaultDict[str, float] = defaultdict(float)
_tiers: Dict[str, str] = {}


def tier(nodeid: str, keywords) -> str:
    """The tier a test runs in, from its path and markers (and ``XLA_FLAGS``: the numeric
    session caps the instruction set)."""
    if nodeid.startswith("tests/images/"):
        return "containers"
    if not nodeid.startswith("tests/trainer/"):
        return "launcher"
    if "xla_cpu_max_isa" in os.environ.get("XLA_FLAGS", ""):
        return "numeric"
    return "spmd" if "spmd" in keywords else "trainer"


def record(report) -> None:
    """Add one phase's duration (``pytest_runtest_logreport``'s report) to its test."""
    _spent[report.nodeid] += report.duration
    _tiers.setdefault(report.nodeid, tier(report.nodeid, report.keywords))


def over_budget() -> List[Tuple[str, float, str, float]]:
    """(test, seconds, tier, its budget) of each test over its tier's budget, slowest
    first."""
    over = [(nodeid, spent, _tiers[nodeid], BUDGET_S[_tiers[nodeid]])
            for nodeid, spent in _spent.items() if spent > BUDGET_S[_tiers[nodeid]]]
    return sorted(over, key=lambda entry: -entry[1])


def summary_lines() -> List[str]:
    return ["{} took {:.0f} s, over the {} tier's budget of {:.0f} s (tests/time_budget.py)"
            .format(nodeid, spent, name, budget)
            for nodeid, spent, name, budget in over_budget()]
