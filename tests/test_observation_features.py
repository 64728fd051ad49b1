"""Every observation is described entry by entry, and the description is the space.

``env.unwrapped.observation_features`` (:class:`batch_env.envs.features.ObsFeature`: name,
meaning, unit, scale, bounds) must have one feature per entry of the observation, for every
env id, every benchmark task and the LLM configurations that append features (request
classes, ``order_features``, a clock grid); unique names; the space's bounds equal to the
features'; and observations that stay within each feature's bounds. Where a feature's
meaning can be checked against ``info`` (the queue, the per-class counts, the SM clock),
it is: a name on the wrong entry fails. The env and task pages list the same tuples
(``docs/_ext/envpages.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import batch_env
from batch_env import tasks
from batch_env.envs import ObsFeature, dynamic_batching, llm_observation, node_batching
from batch_env.envs.features import feature_names, features_box

DOCS = Path(__file__).resolve().parents[1] / "docs"
SHORT = {"horizon_requests": 50, "warmup_requests": 0}
TWO_CLASSES = [
    {"name": "chat", "share": 0.5, "ttft_sla_ms": 1000.0, "tpot_sla_ms": 50.0},
    {"name": "batch", "share": 0.5, "ttft_sla_ms": 10000.0, "tpot_sla_ms": 200.0},
]
CLOCKS = [810.0, 1410.0, 1980.0]
#: LLMBatching-v2 with everything that appends features, and each alone
LLM_EXTRAS = {
    "classes+orders+clock": {
        "profile": "llama-3.1-8b-h100",
        "workload": {"kind": "poisson", "rate_per_s": 8.0},
        "classes": TWO_CLASSES,
        "orders": ["fcfs", "edf", "shortest-prompt", "class-priority"],
        "order_features": True,
        "clock_grid": CLOCKS,
    },
    "order_features": {"orders": ["fcfs", "shortest-prompt"], "order_features": True},
    "clock_grid": {"profile": "llama-3.1-8b-h100", "clock_grid": CLOCKS},
}
CASES = [pytest.param(e, dict(SHORT), id=e.split("/")[1]) for e in batch_env.ENV_IDS]
CASES += [pytest.param(t, dict(SHORT), id=t.split("/")[1]) for t in tasks.TASKS]
CASES += [
    pytest.param("batch_env/LLMBatching-v2", {**SHORT, **kw}, id=f"LLMBatching-v2[{name}]")
    for name, kw in LLM_EXTRAS.items()
]
CASES += [
    pytest.param(
        "batch_env/NodeBatching-v0",
        {**SHORT, "queue_capacity": 100, "max_batch_size": 8},
        id="NodeBatching-v0[small]",
    ),
    pytest.param(
        "batch_env/DynamicBatching-v0",
        {**SHORT, "queue_capacity": 100, "max_batch_size": 7, "decision_interval_ms": 0.5},
        id="DynamicBatching-v0[small]",
    ),
]


def _first_feature(env: gym.Env, info: dict) -> float:
    """What the observation's first feature, the queue in every env, should be: the
    waiting requests of ``info`` over its scale."""
    u = env.unwrapped
    name = u.observation_features[0].name
    if name == "queue_len_over_max_batch":
        return info["queue_len"] / u.config.max_batch_size
    if name == "replica0.waiting_over_max_num_seqs":  # LLMRouting-v0: replica 0's
        v = info["replicas"]
        return min(v["waiting"][0] / v["max_num_seqs"][0], 100.0)
    assert name == "waiting_over_max_num_seqs"
    assert info["waiting"] == info["queue_len"]  # one count, two names
    return min(info["queue_len"] / u.config.max_num_seqs, 100.0)


@pytest.mark.parametrize(("env_id", "kwargs"), CASES)
def test_the_features_describe_the_observation(env_id: str, kwargs: dict):
    env = gym.make(env_id, **kwargs)
    features = env.unwrapped.observation_features
    space = env.observation_space
    assert isinstance(features, tuple) and all(isinstance(f, ObsFeature) for f in features)
    assert len(features) == space.shape[0]
    names = feature_names(features)
    assert len(set(names)) == len(names), names
    for f in features:
        assert f.meaning and f.unit and f.scale, f
    # the space is the features' bounds (built from them)
    np.testing.assert_array_equal(space.low, np.array([f.low for f in features], np.float32))
    np.testing.assert_array_equal(space.high, np.array([f.high for f in features], np.float32))
    rng = np.random.default_rng(0)
    obs, info = env.reset(seed=1)
    for step in range(25):
        assert obs.shape == space.shape
        out = [
            f"{f.name}={x}" for f, x in zip(features, obs, strict=True) if not f.low <= x <= f.high
        ]
        assert not out, f"step {step}: outside their features' bounds: {out}"
        assert obs[0] == pytest.approx(_first_feature(env, info))
        action = int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    env.close()


def test_the_module_constants_name_the_base_features():
    """``OBS_FEATURES`` (public, kept) are the names of a default instance's features (the
    LLM ones: of the base features, before classes, orders and a clock)."""
    for env_id, module in [
        ("batch_env/DynamicBatching-v0", dynamic_batching),
        ("batch_env/NodeBatching-v0", node_batching),
    ]:
        env = gym.make(env_id)
        assert feature_names(env.unwrapped.observation_features) == module.OBS_FEATURES
    env = gym.make("batch_env/LLMBatching-v2", classes=TWO_CLASSES)
    names = feature_names(env.unwrapped.observation_features)
    assert names[:13] == llm_observation.OBS_FEATURES
    assert len(llm_observation.OBS_FEATURES) == 13


def test_the_clock_tasks_name_their_clock_feature():
    """The clock tasks' 14th value is the SM clock / the grid's highest, named so (the
    13 names of ``OBS_FEATURES`` left it unnamed)."""
    for task_id in ("batch_env/LLMClockBursts-v0", "batch_env/LLMClockQwenH200-v0"):
        env = gym.make(task_id, **SHORT)
        u = env.unwrapped
        names = feature_names(u.observation_features)
        assert len(names) == 14 == env.observation_space.shape[0]
        assert names[-1] == "sm_clock_over_max_clock"
        assert u.observation_features[-1].unit == "MHz"
        clocks = u.server.sm_clock.grid
        obs, _ = env.reset(seed=0)
        assert obs[-1] == pytest.approx(1.0)  # an episode starts at the highest clock
        obs, *_, info = env.step(u.action_of(u.grid[-1], clock=clocks[0]))
        assert obs[names.index("sm_clock_over_max_clock")] == pytest.approx(
            info["clock_mhz"] / clocks[-1]
        )
        assert info["clock_mhz"] == clocks[0]


def test_the_class_and_order_features_are_named_by_their_class_and_order():
    env = gym.make("batch_env/LLMTwoClasses-v0", **SHORT)
    u = env.unwrapped
    names = feature_names(u.observation_features)
    assert len(names) == 19
    assert names[13:] == tuple(
        f"{c}.{n}"
        for c in ("chat", "batch")
        for n in (
            "waiting_over_max_num_seqs",
            "running_over_max_num_seqs",
            "oldest_wait_over_ttft_sla",
        )
    )
    N = u.config.max_num_seqs
    obs, info = env.reset(seed=0)
    for _ in range(20):
        for i, c in enumerate(("chat", "batch")):
            assert obs[names.index(f"{c}.waiting_over_max_num_seqs")] * N == pytest.approx(
                info["waiting_by_class"][i]
            )
            assert obs[names.index(f"{c}.running_over_max_num_seqs")] * N == pytest.approx(
                info["running_by_class"][i]
            )
        obs, *_, info = env.step(u.action_of(u.grid[0]))

    env = gym.make("batch_env/LLMBatching-v2", **{**SHORT, **LLM_EXTRAS["classes+orders+clock"]})
    names = feature_names(env.unwrapped.observation_features)
    orders = LLM_EXTRAS["classes+orders+clock"]["orders"]
    assert len(names) == 13 + 3 * 2 + 2 * len(orders) + 1
    assert names[19:-1] == tuple(
        f"{o}.{n}" for o in orders for n in ("next_tokens_over_budget", "next_wait_over_ttft_sla")
    )


def test_the_vector_env_gives_the_scalar_envs_features():
    kwargs = {"horizon_requests": 50, "max_batch_size": 8}
    venv = gym.make_vec("batch_env/DynamicBatching-v0", num_envs=2, **kwargs)
    scalar = gym.make("batch_env/DynamicBatching-v0", **kwargs).unwrapped
    assert venv.unwrapped.observation_features == scalar.observation_features
    assert len(venv.unwrapped.observation_features) == venv.single_observation_space.shape[0]
    assert venv.unwrapped.call("observation_features") == (scalar.observation_features,) * 2
    venv.close()


def test_a_repeated_name_is_refused():
    f = ObsFeature("x", "a quantity", "s", "/ 1", 0.0, 1.0)
    with pytest.raises(ValueError, match=r"\['x'\] appear more than once"):
        features_box([f, f])
    with pytest.raises(ValueError, match="low=2.0 > high=1.0"):
        ObsFeature("y", "a quantity", "s", "/ 1", 2.0, 1.0)


def test_the_env_and_task_pages_list_every_feature():
    """The generated pages (``docs/_ext/envpages.py``) list each feature of the id's default
    instance, or of the task's own env, by index and name, with its unit and range; the
    LLMBatching-v2 page also lists what classes, order features and a clock grid append."""
    sys.path.insert(0, str(DOCS / "_ext"))
    try:
        import envpages
    finally:
        sys.path.remove(str(DOCS / "_ext"))

    def rows(features) -> list[str]:  # noqa: ANN001
        return [
            f"| {i} | `{f.name}` | {f.meaning} | {f.unit} | {f.scale} | [{f.low:g}, {f.high:g}] |"
            for i, f in enumerate(features)
        ]

    for env_id in batch_env.ENV_IDS:
        page = envpages.env_page(env_id, DOCS)
        section = page.split("## Observation Space", 1)[1].split("\n## ", 1)[0]
        features = gym.make(env_id).unwrapped.observation_features
        for row in rows(features):
            assert row in section, (env_id, row)
    v2 = envpages.env_page("batch_env/LLMBatching-v2", DOCS)
    for name in ("{class}.waiting_over_max_num_seqs", "{order}.next_tokens_over_budget"):
        assert f"`{name}`" in v2
    assert "`sm_clock_over_max_clock`" in v2
    for task_id in (
        "batch_env/LLMClockBursts-v0",
        "batch_env/LLMTwoClasses-v0",
        "batch_env/Bursty-v0",
    ):
        section = envpages.task_observation_section(task_id)
        features = gym.make(task_id).unwrapped.observation_features
        assert set(rows(features)) <= set(section), task_id
