"""Test configuration: hypothesis profiles, the path of the repository's reference tables
(``data/``), and helpers several test modules use (``from conftest import ...``)."""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from suite_parts import RACING_FILES, SERIAL_FILES

import batch_env  # noqa: F401 (registers the ids for every test module, in every worker)

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))

#: The longest tests (20-50 s each on this project's VM), collected first, so that a worker
#: takes each at the start instead of the last minute, when the other worker would wait
#: for it idle (the wheel, alphabetically last, once ended the parallel part 30 s after
#: the other worker): test files whose one long test builds an artifact and uses it (the
#: wheel in a fresh venv, the docs site), then single long tests (a node id's start).
FIRST = (
    "tests/test_wheel.py",
    "tests/test_docs.py",
    "tests/test_roundtrip.py",
    "tests/test_reproducibility.py::test_the_thread_count",
    "tests/test_crn.py::test_a_short_run_beats_every_constant_action_on_a_small_clock_task",
)


def _rank(nodeid: str) -> int:
    """Where a test comes in the collection: its place in :data:`FIRST`, else after them."""
    return next((k for k, start in enumerate(FIRST) if nodeid.startswith(start)), len(FIRST))


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """Mark the tests of :data:`SERIAL_FILES` ``serial`` and those of :data:`RACING_FILES`
    ``racing``; put :data:`FIRST` first (the same order on every xdist worker: a stable
    sort on the node id's start)."""
    for item in items:
        if item.path.name in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
        elif item.path.name in RACING_FILES:
            item.add_marker(pytest.mark.racing)
    items.sort(key=lambda item: _rank(item.nodeid))


#: The published tables the shipped profiles are derived from (``data/README.md``), in the repository.
DATA = Path(__file__).resolve().parents[1] / "data"


def tensorboard_scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar a training run wrote to its TensorBoard logs (``run/tb``): tag -> (step, value)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for f in glob.glob(str(run / "tb" / "**" / "events.out.tfevents.*"), recursive=True):
        ea = EventAccumulator(f)
        ea.Reload()
        for tag in ea.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in ea.Scalars(tag))
    return out


def check_env_except_determinism(env: Any) -> None:
    """Gymnasium's env checks other than determinism (real timings vary), on an unwrapped env."""
    from gymnasium.utils import env_checker
    from gymnasium.utils.passive_env_checker import (
        env_reset_passive_checker,
        env_step_passive_checker,
    )

    env_checker.check_space_limit(env.action_space, "action")
    env_checker.check_space_limit(env.observation_space, "observation")
    env_checker.check_seed_deprecation(env)
    env_checker.check_reset_return_info_deprecation(env)
    env_checker.check_reset_return_type(env)
    env_checker.check_reset_options(env)
    env_reset_passive_checker(env)
    env_step_passive_checker(env, 0)
    env_checker.check_returned_data_not_reused(env)


def load_script(name: str) -> Any:
    """``scripts/<name>.py`` as a module (registered in ``sys.modules``, where
    dataclasses and pickling look their module up)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
