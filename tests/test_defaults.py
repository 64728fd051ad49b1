"""One source of defaults: the config dataclasses and constants of ``batch_env.config``.

The env constructors repeat the defaults as literals (readable signatures), the CLI builds
its help text from them, and the train command's table of options a sweep sets names only
sweep fields and train options that exist; this file keeps all of them equal.
"""

from __future__ import annotations

import argparse
import inspect
import re
from dataclasses import fields

import gymnasium as gym
import pytest

import batch_env
from batch_env.config import (
    DEFAULT_PROFILE,
    DEFAULT_WORKLOAD,
    LLM_DEFAULT_PROFILE,
    LLM_DEFAULT_WORKLOAD,
    LLMConfig,
    LLMConfigV1,
    ServingConfig,
    field_default,
)
from batch_env.envs.dynamic_batching import DynamicBatchingEnv
from batch_env.envs.llm_batching import LLMBatchingEnv, LLMBatchingV1Env
from batch_env.envs.node_batching import NodeBatchingEnv
from batch_env.workload import make_workload
from experiments import cli, train
from experiments.harness import options
from experiments.sweep import _KEYS as SWEEP_KEYS

ENVS = [
    (DynamicBatchingEnv, ServingConfig, DEFAULT_PROFILE),
    (NodeBatchingEnv, ServingConfig, DEFAULT_PROFILE),
    (LLMBatchingEnv, LLMConfig, LLM_DEFAULT_PROFILE),
    (LLMBatchingV1Env, LLMConfigV1, LLM_DEFAULT_PROFILE),
]


@pytest.mark.parametrize(
    "env_cls,config_cls,profile", ENVS, ids=lambda x: getattr(x, "__name__", x)
)
def test_env_signature_defaults_are_the_config_defaults(env_cls, config_cls, profile):
    params = inspect.signature(env_cls.__init__).parameters
    for f in fields(config_cls):
        assert f.name in params, f"{env_cls.__name__} does not take {config_cls.__name__}.{f.name}"
        given = params[f.name].default
        if f.name == "reward_weights":
            assert given is None  # None means the config's default weights
            continue
        assert given == field_default(config_cls, f.name), (env_cls.__name__, f.name, given)
    assert params["profile"].default == profile
    assert params["workload"].default is None


@pytest.mark.parametrize(
    "env_id,default,config_cls",
    [
        ("batch_env/DynamicBatching-v0", DEFAULT_WORKLOAD, ServingConfig),
        ("batch_env/NodeBatching-v0", DEFAULT_WORKLOAD, ServingConfig),
        ("batch_env/LLMBatching-v0", LLM_DEFAULT_WORKLOAD, LLMConfig),
        ("batch_env/LLMBatching-v1", LLM_DEFAULT_WORKLOAD, LLMConfigV1),
    ],
)
def test_an_env_built_without_arguments_uses_the_defaults(env_id, default, config_cls):
    env = gym.make(env_id)
    u = env.unwrapped
    try:
        cfg = u.get_config()
        for f in fields(config_cls):
            want = field_default(config_cls, f.name)
            if f.name == "reward_weights":
                assert cfg[f.name] == want.to_dict()
            elif want is not None and f.name != "grid":
                assert cfg[f.name] == want, f.name
        assert cfg["profile"] == (
            DEFAULT_PROFILE if config_cls is ServingConfig else LLM_DEFAULT_PROFILE
        )
        mtp = getattr(u, "max_throughput_rps", None)
        assert cfg["workload"] == make_workload(dict(default), max_throughput_rps=mtp).to_dict()
    finally:
        env.close()


def _options(parser: argparse.ArgumentParser, command: str) -> dict[str, argparse.Action]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {opt: a for a in sub.choices[command]._actions for opt in a.option_strings}


@pytest.mark.parametrize("command", ["evaluate", "solve-smdp"])
def test_cli_help_shows_the_config_defaults(command):
    opts = _options(cli.build_parser(), command)
    checked = 0
    for opt, _dest, name in options.ENV_OPTIONS:
        if opt not in opts:
            continue
        help_text = opts[opt].help or ""
        if (
            name in {f.name for f in fields(ServingConfig)}
            and field_default(ServingConfig, name) is not None
            and name != "reward_weights"
        ):
            want = field_default(ServingConfig, name)
            want = f"{want:g}" if isinstance(want, (int, float)) else str(want)
            assert re.search(rf"\(default {re.escape(want)}\)", help_text), (opt, help_text)
            checked += 1
        elif opt != "--load" and re.search(r"default [0-9]", help_text):  # --load: checked below
            pytest.fail(
                f"{opt} shows a default that is not checked against batch_env.config: {help_text!r}"
            )
    assert checked >= 5
    assert f"default {DEFAULT_PROFILE}" in opts["--profile"].help
    assert f"default {DEFAULT_WORKLOAD['load']:g}" in opts["--load"].help
    assert options.ENV_DEFAULTS == {
        "profile": DEFAULT_PROFILE,
        "load": DEFAULT_WORKLOAD["load"],
        "max_batch_size": field_default(ServingConfig, "max_batch_size"),
    }


def test_the_sweep_table_names_real_sweep_fields_and_train_options():
    """``batch-env train --sweep`` refuses the train options a sweep YAML sets: every row
    names a real train option and a real sweep field (or says in parentheses why the
    option does not combine), and every train option that is also a sweep field is a row."""
    opts = _options(cli.build_parser(), "train")
    rows = {opt: (dest, field) for opt, dest, field in train._SET_BY_SWEEP}
    for opt, (dest, field) in rows.items():
        assert opt in opts and opts[opt].dest == dest, opt
        if not field.startswith("("):
            assert field.split()[0] in SWEEP_KEYS, (opt, field)
    for opt, action in opts.items():
        if action.dest in SWEEP_KEYS and opt.startswith("--"):
            assert opt in rows, f"train {opt} is a sweep field but --sweep does not refuse it"


def test_registered_ids_set_no_defaults_of_their_own():
    """``gymnasium.make(id)`` builds the env with the config's defaults: the registrations
    pass no config field, profile or workload (which would be a second source)."""
    names = (
        {f.name for f in fields(ServingConfig)}
        | {f.name for f in fields(LLMConfig)}
        | {"profile", "workload"}
    )
    for env_id in batch_env.ENV_IDS:
        assert not names & set(gym.spec(env_id).kwargs or {}), env_id
