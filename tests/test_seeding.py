"""batch_env.seeding: PCG64 states of many seeds at once, equal to NumPy's constructors."""

from __future__ import annotations

import numpy as np
import pytest

from batch_env.seeding import _BATCH_SEEDING, pcg64_states

EDGES = [0, 1, 2**32 - 1, 2**32, 2**63 - 2, 2**64 - 1]


def _numpy(seed: int, spawn: int) -> dict:
    return np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(spawn,))).state


@pytest.mark.parametrize("spawn", [0, 1, 7])
def test_states_equal_numpy_for_many_seeds(spawn: int) -> None:
    seeds = EDGES + np.random.default_rng(spawn).integers(0, 2**63 - 1, 300).tolist()
    assert len(seeds) >= _BATCH_SEEDING  # the array path
    assert pcg64_states(seeds, spawn) == [_numpy(s, spawn) for s in seeds]


def test_few_seeds_and_big_seeds_take_numpys_constructors_with_the_same_result() -> None:
    few = EDGES[: _BATCH_SEEDING - 1]
    assert pcg64_states(few, 0) == [_numpy(s, 0) for s in few]
    mixed = [2**64, 5, 2**100 + 3, 2**63] * 2  # seeds of more than two entropy words
    assert pcg64_states(mixed, 1) == [_numpy(s, 1) for s in mixed]


def test_reseeded_generator_draws_what_a_fresh_one_draws() -> None:
    gen = np.random.Generator(np.random.PCG64(0))
    gen.standard_normal(3)  # used before: its state is replaced whole
    states = pcg64_states(list(range(10, 10 + _BATCH_SEEDING)), 0)
    gen.bit_generator.state = states[2]
    fresh = np.random.Generator(np.random.PCG64(np.random.SeedSequence(12, spawn_key=(0,))))
    assert np.array_equal(gen.exponential(1.0, 50), fresh.exponential(1.0, 50))
