"""The benchmark's timing harness (benchmarks/bench.py, run on demand, not in the suite): which
runner is called when, and how many samples each gets. Nothing here reads a time."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
bench = pytest.importorskip("bench")


def _runner(name, log):
    return bench.Runner(name, lambda: log.append(name), lambda: None)


def test_runners_timed_together_alternate_in_slices_without_a_pause(monkeypatch):
    log: list[str] = []
    sleeps: list[int] = []
    monkeypatch.setattr(bench, "PAUSE_S", 0.0)
    monkeypatch.setattr(bench.time, "sleep", lambda s: sleeps.append(len(log)))
    monkeypatch.setattr(bench, "calls_per_batch", lambda call, budget: 16)
    runners = [_runner(name, log) for name in ("avgpool", "function", "literal", "peer", "copy")]
    samples = bench.measure(runners, rounds=3, budget_s=0.0, together=("avgpool", "function", "literal"))
    assert {name: len(s) for name, s in samples.items()} == dict.fromkeys(
        ("avgpool", "function", "literal", "peer", "copy"), 3
    )
    assert all(t > 0 for s in samples.values() for t in s)
    group = 3 * 16  # the three together: 16 calls each a round, in slices of 16 // SLICES
    per_slice = 16 // bench.SLICES
    first_round = log[: group + 2 * 16]  # round 0 starts with the group's place in the rotation
    order = [first_round[i] for i in range(0, group, per_slice)]
    forward, backward = ["avgpool", "function", "literal"], ["literal", "function", "avgpool"]
    assert order == (forward + backward) * (bench.SLICES // 2)
    assert first_round[group:] == ["peer"] * 16 + ["copy"] * 16
    # a pause before each place in the rotation, none between the slices of the group
    assert sleeps[len(runners) : len(runners) + 3] == [0, group, group + 16]  # after calibration's pauses


def test_apart_each_runner_keeps_its_own_batch(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(bench, "PAUSE_S", 0.0)
    monkeypatch.setattr(bench.time, "sleep", lambda s: None)
    monkeypatch.setattr(bench, "calls_per_batch", lambda call, budget: 5)
    runners = [_runner(name, log) for name in ("a", "b")]
    samples = bench.measure(runners, rounds=2, budget_s=0.0)
    assert log == ["a"] * 5 + ["b"] * 5 + ["b"] * 5 + ["a"] * 5
    assert [len(s) for s in samples.values()] == [2, 2]
    assert np.isfinite([t for s in samples.values() for t in s]).all()
