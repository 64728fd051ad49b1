"""The round trip (``batch-env roundtrip``): profile mode, given a profile just measured
on this machine and the machine's speed over time, reproduces real mode (a tiny CPU
model).

Not one of the serial files (``tests/suite_parts.py``): the round trip times by the
thread's CPU clock and asserts on medians of five cycles, and it passes with two busy
processes beside it (``docs/real.md``), so it runs beside the other parallel tests.
"""

from __future__ import annotations

import pytest


@pytest.mark.slow
def test_round_trip_profile_mode_reproduces_real_mode(tmp_path):
    """Profile mode reproduces real mode (CPU, small model), the simulator given the machine's speed.

    The issue's targets, 15% (mean latency) and 10% (mean batch size), are asserted on the
    speed-tracked medians of five cycles: profile mode with the just-measured profile,
    each call's duration times the real-mode episodes' speed at that moment (the model
    time measured over what the profile predicts for the calls made in that sixteenth of
    the episode). The mean speed ratio (the profile against the serving run) is asserted
    only to be recorded and within 0.5-2, and the as-measured and one-scalar matched
    differences only within 50% (a unit or timing bug is far outside that).
    ``batch-env roundtrip`` records all the figures.

    The profile and real mode are timed by the thread's CPU clock (``clock="thread_cpu"``):
    on the wall clock, a contended CPU does not slow every cycle alike, nor every part of
    one (seen: with two other busy processes, cycles' speed ratios from 0.78 to 1.34 in
    one run and a matched latency diff of -17.9%). The thread CPU clock removes
    preemption, not the slowdown that other work causes through shared caches and memory,
    and that comes and goes within an episode (a sixteenth of an episode ran from 0.63 to
    1.73 times the profile's speed with hogs switching on and off): one speed-matching
    scalar cannot absorb it (a cycle's matched latency diff once -78% on a busy host),
    the speed over time does. Five cycles and their median, for what is left.
    """
    import math

    from experiments.roundtrip import run_roundtrip

    res = run_roundtrip(tmp_path, horizon_requests=500, episodes=2, min_time_s=0.5, repeats=5)
    table = res["markdown"]  # every cycle's figures, shown in full when an assertion fails
    assert res["clock"] == "thread_cpu" and res["metadata"]["clock"] == "thread_cpu", table
    for row in res["rows"]:
        assert row["torch"]["model_calls"] > 100, row
        assert row["profile_tracked"]["model_calls"] > 100, row
        ratio = row["speed_ratio_median"]
        assert math.isfinite(ratio) and 0.5 <= ratio <= 2.0, table
        assert abs(row["latency_rel_diff_median"]) <= 0.5, table
        assert abs(row["batch_rel_diff_median"]) <= 0.5, table
        assert abs(row["latency_rel_diff_matched_median"]) <= 0.5, table
        assert abs(row["batch_rel_diff_matched_median"]) <= 0.5, table
        assert abs(row["latency_rel_diff_tracked_median"]) <= 0.15, table
        assert abs(row["batch_rel_diff_tracked_median"]) <= 0.10, table
    assert (tmp_path / "profile.json").exists() and (tmp_path / "roundtrip.md").exists()
