"""tests/time_budget.py: a test over its tier's budget is named with its time at the end of
the session (a warning, never a failure); the tier comes from the test's path and markers."""

from types import SimpleNamespace

import pytest

import time_budget


@pytest.mark.parametrize("nodeid, keywords, xla_flags, expected", [
    ("tests/launcher/test_cli.py::test_a", {}, "", "launcher"),
    ("tests/delivery/test_docs.py::test_a", {}, "", "launcher"),
    ("tests/trainer/test_fit.py::test_a", {}, "", "trainer"),
    ("tests/trainer/test_spmd.py::test_a", {"spmd": 1}, "", "spmd"),
    ("tests/trainer/test_steps.py::test_a", {"numeric": 1}, "--xla_cpu_max_isa=SSE4_2",
     "numeric"),
    ("tests/images/test_build.py::test_a", {}, "", "containers"),
])
def test_the_tier_comes_from_the_path_the_markers_and_the_isa_cap(
        monkeypatch, nodeid, keywords, xla_flags, expected):
    monkeypatch.setenv("XLA_FLAGS", xla_flags)
    assert time_budget.tier(nodeid, keywords) == expected


def test_a_test_over_its_tiers_budget_is_named_with_its_time(monkeypatch):
    monkeypatch.setattr(time_budget, "_spent", type(time_budget._spent)(float))
    monkeypatch.setattr(time_budget, "_tiers", {})
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    budget = time_budget.BUDGET_S["trainer"]
    for nodeid, phases in (("tests/trainer/test_x.py::slow", (1.0, budget, 0.5)),
                           ("tests/trainer/test_x.py::fast", (0.1, budget - 1.0, 0.1))):
        for duration in phases:
            time_budget.record(SimpleNamespace(nodeid=nodeid, duration=duration, keywords={}))
    assert time_budget.summary_lines() == [
        "tests/trainer/test_x.py::slow took {:.0f} s, over the trainer tier's budget of "
        "{:.0f} s (tests/time_budget.py)".format(budget + 1.5, budget)]
