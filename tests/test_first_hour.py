"""What a new user meets first on the task ids (issue 62): ``evaluate`` and ``benchmark``
run on every task id with no other option, a baseline made on a task is the task's tuned
one (and says so), baseline settings pass on the command line, ids with or without
``batch_env/``, and the smaller rough edges (plain functions as policies, configs that
leave a field out, the LLM profile loader, one-episode tables)."""

from __future__ import annotations

import dataclasses
import json

import gymnasium as gym
import pytest

import baselines
import batch_env
from batch_env import tasks
from batch_env.profiles import llm_arch
from experiments.cli import main as _main


def main(argv: list[str]) -> int:
    """``batch-env`` with ``argv``: its exit status (argparse's usage errors exit 2)."""
    try:
        return _main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


#: the episode length the CLI runs below use on every task (the tasks' own are 20,000 to
#: 3,000,000 requests): only the length, which a task id lets a caller set, is shortened
SHORT = {"horizon_requests": 60, "warmup_requests": 0}


@pytest.fixture
def short_tasks(monkeypatch):
    """Every task with short episodes and two protocol seeds, as registered (so that
    ``gymnasium.make(<task id>)``, ``evaluate`` and ``benchmark`` see the same task);
    the task's problem, its fixed kwargs, is untouched."""
    for tid, task in list(tasks.TASKS.items()):
        kwargs = {**task.kwargs, **SHORT}
        monkeypatch.setitem(
            tasks.TASKS,
            tid,
            dataclasses.replace(
                task,
                kwargs=tasks._frozen(kwargs),
                seeds=task.seeds[:2],
                eval_loads=task.eval_loads[:2],
            ),
        )
        monkeypatch.setattr(gym.registry[tid], "kwargs", {**gym.registry[tid].kwargs, **SHORT})


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # LLMMemoryPressure-v0: superseded
@pytest.mark.parametrize("task_id", list(tasks.TASKS))
def test_evaluate_and_benchmark_run_on_every_task_id_with_no_other_option(
    task_id, short_tasks, capsys
):
    """``batch-env evaluate`` added DynamicBatching-v0's default load to a task id, which
    the task refused (LowLoadEnergy-v0, Bursty-v0, NodeAnyLoad-v0)."""
    assert main(["evaluate", "--env-id", task_id, "--policy", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "reward_rate_per_s" in out and "greedy" in out
    assert main(["benchmark", "--tasks", task_id, "--policy", "greedy"]) == 0
    out = capsys.readouterr().out
    assert f"| {task_id} | greedy |" in out and "does not apply" not in out


def _expected_settings(task_id: str, name: str) -> dict | None:
    """The rule, written out: the stored reference labelled ``name`` where it runs that
    baseline, else the best-scoring stored reference that runs it."""
    figures = tasks.references()[task_id]["policies"]
    runs = {lb: f for lb, f in figures.items() if f.get("policy") == name and not f.get("oracle")}
    if not runs:
        return None
    if name in runs:
        return runs[name]["params"]
    return max(runs.values(), key=lambda f: f["reward_rate_per_s"])["params"]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_baseline_made_on_a_task_takes_the_tasks_stored_settings():
    checked = 0
    for task_id in tasks.TASKS:
        env = gym.make(task_id, **SHORT)
        names = {f.get("policy") for f in tasks.references()[task_id]["policies"].values()}
        oracles = {"oracle-srpt", "smdp-oracle", "rollout-oracle"}  # need another env
        for name in sorted(n for n in names if n in baselines.available() and n not in oracles):
            want = _expected_settings(task_id, name)
            policy = baselines.make(name, env=env)
            assert policy.settings["params"] == (want or {}), (task_id, name)
            if want:
                assert repr(task_id) not in policy.settings["source"]
                assert task_id in policy.settings["source"]
                checked += 1
        env.close()
    assert checked >= 10  # clock-queue, static-budget, timeout, graph, static-cap, ...


def test_clock_queue_on_a_clock_task_is_the_tuned_rule_not_the_generic_one():
    """The example of the issue: on LLMClockBursts-v0, clock-queue with no settings ran at
    budget 8,192 and 1,980 MHz, worse than greedy; the task's reference uses 512 tokens
    and 810/1,620 MHz."""
    env = gym.make("batch_env/LLMClockBursts-v0", **SHORT)
    policy = baselines.make("clock-queue", env=env)
    assert policy.settings["params"] == {
        "budget": 512,
        "high_clock": 1620.0,
        "low_clock": 810.0,
        "threshold": 1,
    }
    assert (
        "the stored reference 'clock-queue' of batch_env/LLMClockBursts-v0"
        in (policy.settings["source"])
    )
    own = baselines.make("clock-queue", env=env, task_defaults=False)
    assert own.settings == {"params": {}, "source": "the baseline's defaults"}
    given = baselines.make("clock-queue", env=env, threshold=4)
    assert given.settings == {
        "params": {"threshold": 4},
        "source": "given; the rest the baseline's defaults",
    }
    env.close()


def test_baseline_settings_pass_on_the_command_line(short_tasks, capsys):
    argv = ["evaluate", "--env-id", "LLMClockBursts-v0", "--episodes", "1", "--json"]
    spec = "clock-queue:low_clock=990,threshold=4"
    assert main([*argv, "--policy", "clock-queue", spec]) == 0
    tuned, given = json.loads(capsys.readouterr().out)
    assert tuned["settings"]["params"]["low_clock"] == 810.0
    assert given["policy"] == spec
    assert given["settings"]["params"] == {"low_clock": 990, "threshold": 4}
    # the table names the settings each baseline ran with
    assert main([*argv[:-1], "--policy", "clock-queue", spec]) == 0
    out = capsys.readouterr().out
    assert "settings: clock-queue: budget=512, high_clock=1620.0, low_clock=810.0" in out
    assert f"settings: {spec}: low_clock=990, threshold=4 (given" in out
    assert "one episode: no confidence interval" in out and "nan" not in out
    # benchmark takes the same form and says which settings each task's run used
    assert main(["benchmark", "--tasks", "LLMClockBursts-v0", "--policy", spec]) == 0
    out = capsys.readouterr().out
    assert "LLMClockBursts-v0: clock-queue:low_clock=990,threshold=4 with low_clock=990" in out
    assert main(["benchmark", "--tasks", "LLMClockBursts-v0", "--policy", "static-budget"]) == 0
    out = capsys.readouterr().out
    assert "static-budget with budget=512, clock=1200.0 (the task's stored reference" in out


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("clock-queue:low_clock", "setting 'low_clock' is not key=value"),
        ("clock-queue:foo=3", "its settings are ['low_clock', 'high_clock'"),
        ("clockq:low_clock=3", "did you mean 'clock-queue'?"),
        ("clock-queue:budget=[1,", "is not a value"),
    ],
)
def test_a_bad_baseline_setting_is_one_line_naming_it(spec, message, capsys):
    argv = ["evaluate", "--env-id", "LLMClockBursts-v0", "--horizon-requests", "20"]
    assert main([*argv, "--episodes", "1", "--policy", spec]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_ids_are_taken_with_or_without_the_namespace_and_a_typo_gets_did_you_mean(capsys):
    assert tasks.resolve_id("LLMClockBursts-v0") == "batch_env/LLMClockBursts-v0"
    assert tasks.resolve_id("batch_env/Bursty-v0") == "batch_env/Bursty-v0"
    assert tasks.resolve_id("DynamicBatching-v0") == "batch_env/DynamicBatching-v0"
    assert tasks.get("LowLoadEnergy-v0").id == "batch_env/LowLoadEnergy-v0"
    assert tasks.resolve_id("CartPole-v1") == "CartPole-v1"  # other registered ids as they are
    # train listed the five base envs only, with no "did you mean"
    assert main(["train", "--env-id", "batch_env/LLMClockBurst-v0", "--n-timesteps", "8"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'batch_env/LLMClockBursts-v0'" in err
    assert "batch_env/LLMTwoClasses-v0" in err and "batch_env/LLMBatching-v2" in err
    for argv in (
        ["evaluate", "--env-id", "LLMClockBurts-v0"],
        ["benchmark", "--tasks", "LowLoadEnergy", "--policy", "greedy"],
        ["headroom", "--tasks", "Bursty-v1", "--no-planners"],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "did you mean" in err and "Traceback" not in err, argv


def test_every_env_id_option_stores_the_registered_id():
    from experiments.cli import build_parser

    parser = build_parser()
    for argv in (["train"], ["evaluate"], ["record", "greedy"]):
        args = parser.parse_args([*argv, "--env-id", "LowLoadEnergy-v0"])
        assert args.env_id == "batch_env/LowLoadEnergy-v0", argv


def test_evaluate_takes_a_plain_function_and_refuses_what_is_no_policy():
    env = gym.make("batch_env/DynamicBatching-v0", horizon_requests=50)

    def serve_all(obs, info):
        return int(info["action_mask"].nonzero()[0].max())

    res = batch_env.evaluate(serve_all, env, n_episodes=2, seed=0)
    assert res.policy == "serve_all"
    greedy = batch_env.evaluate(baselines.make("greedy", env=env), env, n_episodes=2, seed=0)
    assert res.mean("reward_rate_per_s") == greedy.mean("reward_rate_per_s")
    with pytest.raises(TypeError, match=r"policy=3 is not a policy: give an object with reset"):
        batch_env.evaluate(3, env, n_episodes=1)

    class ActOnly:
        def act(self, obs, info):
            return 1

    with pytest.raises(TypeError, match=r"has act\(\) but no reset\(\)"):
        batch_env.evaluate(ActOnly(), env, n_episodes=1)


def test_a_config_without_kv_heads_is_multi_head_attention_and_says_so(tmp_path, capsys):
    config = {  # a Llama-3.2-3B shape without num_key_value_heads (it has 8)
        "num_hidden_layers": 28,
        "hidden_size": 3072,
        "num_attention_heads": 24,
        "intermediate_size": 8192,
        "vocab_size": 128256,
        "head_dim": 128,
    }
    arch = llm_arch.ModelArch.from_config(config, name="l32")
    assert arch.kv_heads == 24 and "num_key_value_heads is not in the config" in arch.assumed[0]
    assert llm_arch.ModelArch.from_config({**config, "num_key_value_heads": 8}).assumed == ()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    out = tmp_path / "p.json"
    argv = ["profile", "llm", "--model-config", str(path), "--gpu", "h100-sxm", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "note: num_key_value_heads is not in the config: taken as num_attention_heads = 24" in (
        text
    )
    assert "336 KiB per token" in text
    assert "assumed: num_key_value_heads" in json.loads(out.read_text())["citations"]["model"]


def test_the_batch_profile_loader_points_an_llm_profile_to_its_loader():
    with pytest.raises(FileNotFoundError, match=r"is a shipped LLM profile.*load_llm"):
        batch_env.profiles.load("llama-2-7b-h100")
    data = batch_env.profiles.load_llm("llama-2-7b-h100").raw
    with pytest.raises(ValueError, match=r"'kind' = 'llm' is an LLM profile.*load_llm"):
        batch_env.profiles.load(dict(data))


def test_headroom_says_what_it_does_and_takes_one_planner_seed(short_tasks, tmp_path, capsys):
    """``headroom`` printed nothing while it planned (about 100 s), named the best
    constant by its number where its table prints the action, and refused
    ``--planner-seeds 1``."""
    argv = ["headroom", "--tasks", "LowLoadEnergy-v0", "--seeds", "1", "--planner-seeds", "1"]
    argv += ["--horizon-requests", "30", "--planner-horizon-requests", "20", "--top", "2"]
    argv += ["--tuning-seeds", "1", "--samples", "1", "--results-dir", str(tmp_path)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    err = captured.err
    assert "tuning 33 constant actions" in err and "best action " in err
    assert "the two planners on 1 x 20 requests" in err
    assert "rollout: episode 1/1" in err and "rollout-oracle done in" in err
    assert "| LowLoadEnergy-v0 |" in captured.out


def test_headroom_names_an_llm_action_by_its_parts():
    from experiments.headroom import action_name

    env = gym.make("batch_env/LLMClockBursts-v0", **SHORT)
    assert action_name(env, 0).startswith("LLMAction(cap=16, budget=256")
    env.close()
    assert action_name(gym.make("batch_env/LowLoadEnergy-v0", **SHORT), 8) == "8"


def test_every_plain_sb3_example_sets_one_torch_thread():
    """SB3's small MLPs on a CPU run many times slower on torch's default thread count
    (2,048 PPO steps on FactoredAction(LLMClockBursts-v0): 22.8 s against 0.9 s on a
    2-core machine); ``batch-env train`` sets one thread, and every code block that
    builds an SB3 algorithm by hand, which users copy, says so and does it."""
    import re

    from test_docs import _BLOCK, hand_written_pages

    algo = re.compile(r"\b(PPO|A2C|DQN|MaskablePPO|RecurrentPPO)\(")
    found = []
    for page in hand_written_pages():
        for block in _BLOCK.findall(page.read_text()):
            if algo.search(block):
                found.append(page.name)
                assert "torch.set_num_threads(1)" in block, page
    assert "README.md" in found
