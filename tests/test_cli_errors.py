"""Every subcommand refuses bad input with one line on stderr, ``error: ...`` naming the
option or file (and its value), exit status 2, no traceback, and nothing written.

Each case runs ``experiments.cli.main`` in-process in an empty working folder (its
``--results-dir``, ``--runs-dir``, ``--out`` and run directories point inside it) that
holds only the damaged or nonsense input files below; the folder's listing must be the
same after the command as before. Two cases run the real console entry point in a
subprocess to check the process's exit status.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
LLM = "batch_env/LLMBatching-v0"
DB = "batch_env/DynamicBatching-v0"
TINY_COMPARE = {
    "name": "tiny",
    "env": {"horizon_requests": 50},
    "workloads": {"poisson": {"kind": "poisson"}},
    "loads": [0.5],
    "seeds": 1,
    "policies": {"greedy": {}},
    "reference": "greedy",
}
TINY_SWEEP = {"name": "sw", "algo": "ppo", "n_timesteps": 64, "env": {"horizon_requests": 50}}


def _compare(**change):
    return yaml.safe_dump({**TINY_COMPARE, **change})


#: input files of the cases: name -> text (str) or bytes
FILES = {
    "bad.yaml": "name: [unclosed\n  loads: {",
    "list.yaml": "- 1\n- 2\n",
    "binary.yaml": b"\xff\xfe\x00\x81garbage\x00",
    "empty.yaml": "",
    "afile": "not a folder\n",
    "cmp_unknown.yaml": _compare(bogus_field=1),
    "cmp_loads.yaml": _compare(loads=[-1]),
    "cmp_env.yaml": _compare(env={"bogus_key": 1}),
    "cmp_env_value.yaml": _compare(env={"max_batch_size": 0}),
    "cmp_name.yaml": _compare(name="../escape"),
    "cmp_policy.yaml": _compare(policies={"p": {"name": "nope"}}, reference="p"),
    "cmp_seeds.yaml": _compare(seeds=0),
    "cmp_workloads.yaml": _compare(workloads={"poisson": "poisson"}),
    "cmp_pareto.yaml": _compare(pareto=5),
    "cmp_agent.yaml": _compare(policies={"me": {"agent": "no-such-run"}}, reference="me"),
    "hp_unknown.yml": yaml.safe_dump({DB: {"n_envs": 1, "bogus_param": 3}}),
    "hp_type.yml": yaml.safe_dump({DB: {"n_envs": 1, "n_steps": "many"}}),
    "hp_n_envs.yml": yaml.safe_dump({DB: {"n_envs": 0}}),
    "hp_noentry.yml": yaml.safe_dump({"other/Env-v0": {"n_envs": 1}}),
    "hp_entry_list.yml": yaml.safe_dump({DB: [1, 2]}),
    "hp_policy_kwargs.yml": yaml.safe_dump({DB: {"policy_kwargs": "import os"}}),
    "sweep_unknown.yaml": yaml.safe_dump({**TINY_SWEEP, "bogus_field": 1}),
    "sweep_algo.yaml": yaml.safe_dump({**TINY_SWEEP, "algo": "nope"}),
    "sweep_grid.yaml": yaml.safe_dump({**TINY_SWEEP, "grid": {"bogus_param": [1, 2]}}),
    "agents_missing.yaml": yaml.safe_dump({"name": "a", "algo": "ppo"}),
    "agents_seeds.yaml": yaml.safe_dump(
        {
            "name": "a",
            "algo": "ppo",
            "n_timesteps": 10,
            "train_seeds": "x",
            "eval_seeds": [1],
            "env": {},
            "settings": {},
        }
    ),
    "lazy_train.yaml": yaml.safe_dump({**TINY_COMPARE, "train": {"greedy": {"algo": "ppo"}}}),
    "llm_profiles.yaml": yaml.safe_dump(
        {
            "profiles": [1],
            "traffic": {"t": {"kind": "poisson", "lengths": {}}},
            "policies": {"p": {"policy": "static-cap"}},
            "seeds": [0],
            "reference": "p",
        }
    ),
    "run_broken/config.yaml": "algo: [unclosed",
    "run_empty/keep.txt": "a folder that is not a run\n",
}
ADIR = "adir"  # an existing empty folder, given where a file is expected

#: (argv, words the error line must contain): every subcommand, nonsense numbers,
#: missing / damaged / non-mapping files, bad mappings, options that do not apply
CASES = [
    # demo
    (["demo", "--train-steps", "-1"], ["--train-steps", "'-1'", ">= 0"]),
    (["demo", "--config", "missing.yaml", "--train-steps", "0"], ["missing.yaml"]),
    (["demo", "--config", "bad.yaml", "--train-steps", "0"], ["bad.yaml", "invalid YAML"]),
    (["demo", "--config", "list.yaml", "--train-steps", "0"], ["list.yaml", "mapping"]),
    (
        ["demo", "--results-dir", "afile", "--train-steps", "0"],
        ["--results-dir", "afile", "folder"],
    ),
    (["demo", "--runs-dir", "afile"], ["--runs-dir", "afile"]),
    # compare
    (["compare", "--config", "missing.yaml"], ["missing.yaml", "not found"]),
    (["compare", "--config", "bad.yaml"], ["bad.yaml", "invalid YAML"]),
    (["compare", "--config", "list.yaml"], ["list.yaml", "mapping"]),
    (["compare", "--config", "binary.yaml"], ["binary.yaml", "invalid YAML"]),
    (["compare", "--config", "empty.yaml"], ["empty.yaml", "mapping"]),
    (["compare", "--config", ADIR], [ADIR, "not found"]),
    (
        ["compare", "--config", "cmp_unknown.yaml"],
        ["cmp_unknown.yaml", "bogus_field", "allowed keys"],
    ),
    (["compare", "--config", "cmp_loads.yaml"], ["cmp_loads.yaml", "loads=[-1]"]),
    (["compare", "--config", "cmp_env.yaml"], ["cmp_env.yaml", "bogus_key"]),
    (["compare", "--config", "cmp_env_value.yaml"], ["cmp_env_value.yaml", "max_batch_size=0"]),
    (["compare", "--config", "cmp_name.yaml"], ["cmp_name.yaml", "name='../escape'"]),
    (["compare", "--config", "cmp_policy.yaml"], ["cmp_policy.yaml", "'nope'", "available"]),
    (["compare", "--config", "cmp_seeds.yaml"], ["cmp_seeds.yaml", "seeds=0"]),
    (["compare", "--config", "cmp_workloads.yaml"], ["cmp_workloads.yaml", "workloads="]),
    (["compare", "--config", "cmp_pareto.yaml"], ["cmp_pareto.yaml", "pareto=5"]),
    (["compare", "--config", "cmp_agent.yaml"], ["cmp_agent.yaml", "no-such-run"]),
    (["compare", "--max-retries", "-1"], ["--max-retries", "'-1'", ">= 0"]),
    (["compare", "--num-cpus", "0"], ["--num-cpus", "'0'", ">= 1"]),
    (["compare", "--address", "auto"], ["address='auto'", "ray"]),
    (["compare", "--backend", "nope"], ["--backend", "'nope'"]),
    (["compare", "--results-dir", "afile"], ["--results-dir", "afile"]),
    # solve-smdp
    (["solve-smdp", "--max-states", "0"], ["--max-states", "'0'", ">= 1"]),
    (["solve-smdp", "--rate-per-s", "-3"], ["--rate-per-s", "'-3'", "> 0"]),
    (["solve-smdp", "--rate-per-s", "3000", "--load", "0.5"], ["--rate-per-s", "--load"]),
    (
        ["solve-smdp", "--load", "0.5", "--workload", "{kind: poisson, load: 0.3}"],
        ["--load", "--workload"],
    ),
    (["solve-smdp", "--load", "nan"], ["--load", "'nan'", "> 0"]),
    (["solve-smdp", "--reward-weights", "[1]"], ["--reward-weights", "mapping"]),
    (["solve-smdp", "--workload", "kind: [unclosed"], ["--workload", "not valid YAML"]),
    (["solve-smdp", "--method", "nope"], ["--method", "'nope'"]),
    (["solve-smdp", "--max-batch-size", "x"], ["--max-batch-size", "'x'"]),
    # evaluate
    (["evaluate", "--episodes", "0"], ["--episodes", "'0'", ">= 1"]),
    (["evaluate", "--episodes", "abc"], ["--episodes", "'abc'"]),
    (["evaluate", "--seed", "-1"], ["--seed", "'-1'", ">= 0"]),
    (["evaluate", "--max-batch-size", "0", "--episodes", "1"], ["max_batch_size=0"]),
    (
        ["evaluate", "--env-id", LLM, "--sla-ms", "10"],
        ["--sla-ms=10.0", LLM, "ttft_sla_ms", "tpot_sla_ms"],
    ),
    (
        ["evaluate", "--env-id", LLM, "--max-batch-size", "8"],
        ["--max-batch-size=8", LLM, "max_num_seqs"],
    ),
    (["evaluate", "--env-id", LLM, "--load", "0.5"], ["--load=0.5", LLM, "rate_per_s"]),
    (
        ["evaluate", "--env-id", LLM, "--service", "lognormal"],
        ["--service='lognormal'", LLM, "--env-kwargs"],
    ),
    (["evaluate", "--env-id", LLM, "--service-cv", "0.5"], ["--service-cv=0.5", LLM]),
    (
        ["evaluate", "--env-id", LLM, "--decision-interval-ms", "1"],
        ["--decision-interval-ms=1.0", LLM],
    ),
    (["evaluate", "--env-kwargs", "{bogus_key: 1}"], ["--env-kwargs", "bogus_key", "sla_ms"]),
    (
        ["evaluate", "--env-id", LLM, "--env-kwargs", "{bogus_key: 1}"],
        ["--env-kwargs", "bogus_key", "ttft_sla_ms"],
    ),
    (["evaluate", "--env-kwargs", "x: ["], ["--env-kwargs", "not valid YAML"]),
    (["evaluate", "--env-kwargs", "[1]"], ["--env-kwargs", "mapping"]),
    (
        ["evaluate", "--sla-ms", "5", "--env-kwargs", "{sla_ms: 3}"],
        ["--env-kwargs", "sla_ms", "--sla-ms"],
    ),
    (
        ["evaluate", "--policy", "nope", "--episodes", "1", "--horizon-requests", "20"],
        ["'nope'", "available"],
    ),
    (["evaluate", "--policy", "ppo:no-such-run", "--episodes", "1"], ["no-such-run", "not found"]),
    (["evaluate", "--policy", f"ppo:{ADIR}", "--episodes", "1"], [ADIR, "config.yaml"]),
    (
        ["evaluate", "--policy", "ppo:run_broken", "--episodes", "1"],
        ["run_broken", "config.yaml", "corrupt"],
    ),
    (["evaluate", "--policy", "ppo", "--episodes", "1"], ["'ppo'", "available"]),
    (["evaluate", "--env-id", "nope"], ["--env-id", "'nope'"]),
    (["evaluate", "--profile", "nope", "--episodes", "1"], ["nope"]),
    # record
    (["record", "nope"], ["'nope'", "neither a run folder", "greedy"]),
    (["record", "run_empty"], ["run_empty", "config.yaml"]),
    (["record", "greedy", "--episodes", "0"], ["--episodes", "'0'", ">= 1"]),
    (["record", "greedy", "--max-frames", "x"], ["--max-frames", "'x'"]),
    (["record", "greedy", "--env-kwargs", "[1]"], ["--env-kwargs", "mapping"]),
    (["record", "greedy", "--env-id", "nope"], ["nope"]),
    (["record", "greedy", "--env-kwargs", "{bogus_key: 1}"], ["--env-kwargs", "bogus_key"]),
    # a task id pins its problem; an algorithm that does not fit; a hyperparameter name
    (
        [
            "train",
            "--env-id",
            "batch_env/LowLoadEnergy-v0",
            "--env-kwargs",
            "{workload: {kind: poisson, load: 0.9}}",
            "--run-dir",
            "r",
        ],
        ["LowLoadEnergy-v0", "fixes workload", "tasks.variant", "--env-config"],
    ),
    (
        [
            "train",
            "--algo",
            "dqn",
            "--env-id",
            "batch_env/LLMBatching-v1",
            "--env-kwargs",
            "{budget_grid: [256, 512, 1024, 2048]}",
            "--run-dir",
            "r",
        ],
        ["algo='dqn' does not fit", "Discrete(1024)", "ppo, a2c, ppo_mask, ppo_lstm"],
    ),
    (
        ["train", "--hyperparams", "ppo-nope", "--run-dir", "r"],
        ["ppo-nope", "ppo-node-fraction", "ppo_mask"],
    ),
    # train: nonsense numbers
    (["train", "--verbose", "-1"], ["--verbose", "'-1'", ">= 0"]),
    (["train", "--n-timesteps", "-5"], ["--n-timesteps", "'-5'", ">= 0"]),
    (["train", "--n-timesteps", "0"], ["n_timesteps=0", ">= 1", "warm_start"]),
    (["train", "--warm-start", "{policy: [unclosed"], ["--warm-start", "not valid YAML"]),
    (["train", "--warm-start", "graph"], ["--warm-start", "must be a mapping"]),
    (["train", "--warm-start", "{policy: nope}"], ["warm_start", "'nope'", "not a baseline"]),
    (["train", "--warm-start", "{policy: greedy, epochs: 0}"], ["warm_start: epochs", "0"]),
    (
        ["train", "--warm-start", "{policy: static, params: {bogus: 1}}"],
        ["warm_start", "refuses params", "bogus"],
    ),
    (["train", "--checkpoint-freq", "0"], ["--checkpoint-freq", "'0'", ">= 1"]),
    (["train", "--eval-freq", "-1"], ["--eval-freq", "'-1'", ">= 0"]),
    (["train", "--eval-episodes", "0"], ["--eval-episodes", "'0'", ">= 1"]),
    (["train", "--num-envs", "0"], ["--num-envs", "'0'", ">= 1"]),
    (["train", "--threads", "0"], ["--threads", "'0'", ">= 1"]),
    (["train", "--seed", "-1"], ["--seed", "'-1'", ">= 0"]),
    (["train", "--algo", "nope"], ["--algo", "'nope'"]),
    (
        ["train", "--centering-gain", "bogus", "--run-dir", "r"],
        ["centering_gain='bogus'", "greedy"],
    ),
    (["train", "--device", "bogus", "--run-dir", "r"], ["device='bogus'", "cpu"]),
    # train: env kwargs and env config files
    (["train", "--env-kwargs", "{bogus_key: 1}", "--run-dir", "r"], ["bogus_key", "sla_ms"]),
    (["train", "--env-kwargs", "[1]", "--run-dir", "r"], ["--env-kwargs", "mapping"]),
    (["train", "--env-kwargs", "{max_batch_size: 0}", "--run-dir", "r"], ["max_batch_size=0"]),
    (
        ["train", "--env-config", "missing.yaml", "--run-dir", "r"],
        ["--env-config", "missing.yaml", "not found"],
    ),
    (
        ["train", "--env-config", "bad.yaml", "--run-dir", "r"],
        ["--env-config", "bad.yaml", "not valid YAML"],
    ),
    (["train", "--env-config", "binary.yaml", "--run-dir", "r"], ["--env-config", "binary.yaml"]),
    (
        ["train", "--env-config", "list.yaml", "--run-dir", "r"],
        ["--env-config", "list.yaml", "mapping"],
    ),
    (["train", "--env-config", ADIR, "--run-dir", "r"], ["--env-config", ADIR, "folder"]),
    # train: hyperparameter files
    (["train", "--hyperparams", "missing.yml", "--run-dir", "r"], ["missing.yml", "not found"]),
    (["train", "--hyperparams", ADIR, "--run-dir", "r"], [ADIR, "folder"]),
    (["train", "--hyperparams", "bad.yaml", "--run-dir", "r"], ["bad.yaml", "not valid YAML"]),
    (
        ["train", "--hyperparams", "binary.yaml", "--run-dir", "r"],
        ["binary.yaml", "not valid YAML"],
    ),
    (["train", "--hyperparams", "list.yaml", "--run-dir", "r"], ["list.yaml", "mapping"]),
    (["train", "--hyperparams", "hp_noentry.yml", "--run-dir", "r"], ["hp_noentry.yml", DB]),
    (
        ["train", "--hyperparams", "hp_entry_list.yml", "--run-dir", "r"],
        ["hp_entry_list.yml", "mapping"],
    ),
    (
        ["train", "--hyperparams", "hp_unknown.yml", "--run-dir", "r"],
        ["hp_unknown.yml", "bogus_param", "allowed"],
    ),
    (
        ["train", "--hyperparams", "hp_type.yml", "--run-dir", "r"],
        ["hp_type.yml", "n_steps='many'", "integer"],
    ),
    (
        ["train", "--hyperparams", "hp_n_envs.yml", "--run-dir", "r"],
        ["hp_n_envs.yml", "n_envs=0", ">= 1"],
    ),
    (
        ["train", "--hyperparams", "hp_policy_kwargs.yml", "--run-dir", "r"],
        ["hp_policy_kwargs.yml", "policy_kwargs"],
    ),
    (
        ["train", "--algo", "dqn", "--hyperparams", "hp_type.yml", "--run-dir", "r"],
        ["hp_type.yml", "n_steps"],
    ),
    # train: run directories and resume
    (["train", "--run-dir", "afile", "--centering-gain", "1"], ["run_dir='afile'", "is a file"]),
    (["train", "--resume"], ["--resume", "--run-dir"]),
    (["train", "--resume", "--run-dir", "missing-run"], ["missing-run", "not found"]),
    (["train", "--resume", "--run-dir", "run_empty"], ["run_empty", "config.yaml"]),
    (["train", "--resume", "--run-dir", "run_broken"], ["run_broken", "config.yaml", "corrupt"]),
    (
        ["train", "--resume", "--run-dir", "run_broken", "--checkpoint-freq", "-1"],
        ["--checkpoint-freq", "'-1'"],
    ),
    # train: sweep
    (["train", "--max-retries", "2"], ["--max-retries=2", "--sweep"]),
    (["train", "--runs-dir", "x"], ["--runs-dir='x'", "--sweep"]),
    (["train", "--sweep", "missing.yaml"], ["missing.yaml", "not found"]),
    (["train", "--sweep", "bad.yaml"], ["bad.yaml", "invalid YAML"]),
    (["train", "--sweep", "sweep_unknown.yaml"], ["sweep_unknown.yaml", "bogus_field"]),
    (["train", "--sweep", "sweep_algo.yaml"], ["sweep_algo.yaml", "algo='nope'"]),
    (["train", "--sweep", "sweep_grid.yaml"], ["sweep_grid.yaml", "bogus_param"]),
    (["train", "--sweep", "sweep_grid.yaml", "--algo", "a2c"], ["--algo='a2c'", "--sweep"]),
    (
        ["train", "--sweep", "sweep_grid.yaml", "--checkpoint-freq", "50000"],
        ["--checkpoint-freq=50000", "--sweep"],
    ),
    (["train", "--sweep", "sweep_grid.yaml", "--seed", "0"], ["--seed=0", "--sweep"]),
    (["train", "--sweep", "sweep_grid.yaml", "--eval-freq", "0"], ["--eval-freq=0", "--sweep"]),
    (["train", "--sweep", "sweep_grid.yaml", "--runs-dir", "afile"], ["--runs-dir", "afile"]),
    # curves
    (["curves", "no_such_run"], ["no_such_run", "evaluations.json"]),
    # agents
    (["agents", "--workers", "0"], ["--workers", "'0'", ">= 1"]),
    (["agents", "--config", "missing.yaml"], ["missing.yaml", "not found"]),
    (["agents", "--config", "bad.yaml"], ["bad.yaml", "invalid YAML"]),
    (["agents", "--config", "list.yaml"], ["list.yaml", "mapping"]),
    (
        ["agents", "--config", "agents_missing.yaml"],
        ["agents_missing.yaml", "missing required key"],
    ),
    (["agents", "--config", "agents_seeds.yaml"], ["agents_seeds.yaml", "train_seeds='x'"]),
    (["agents", "--settings", "nope"], ["settings", "nope"]),
    (["agents", "--results-dir", "afile"], ["--results-dir", "afile"]),
    # lazybatching
    (["lazybatching", "--config", "missing.yaml"], ["missing.yaml", "not found"]),
    (["lazybatching", "--config", "bad.yaml"], ["bad.yaml", "invalid YAML"]),
    (["lazybatching", "--config", "lazy_train.yaml"], ["lazy_train.yaml", "train.greedy", "agent"]),
    (["lazybatching", "--results-dir", "afile"], ["--results-dir", "afile"]),
    # regimes
    (["regimes"], ["the following arguments are required: map"]),
    (["regimes", "nope"], ["invalid choice: 'nope'"]),
    (["regimes", "smdp", "--results-dir", "afile"], ["--results-dir", "afile"]),
    (["regimes", "llm", "--results-dir", "afile"], ["--results-dir", "afile"]),
    (["regimes", "lazybatching", "--results-dir", "afile"], ["--results-dir", "afile"]),
    (["regimes", "lazybatching", "--address", "auto"], ["address", "ray"]),
    (["regimes", "lazybatching", "--num-cpus", "0"], ["--num-cpus", "'0'"]),
    # llm
    (["llm", "--config", "missing.yaml"], ["missing.yaml", "not found"]),
    (["llm", "--config", "binary.yaml"], ["binary.yaml", "invalid YAML"]),
    (["llm", "--config", "llm_profiles.yaml"], ["llm_profiles.yaml", "profiles=[1]"]),
    (["llm", "--name", "../escape"], ["--name", "'../escape'"]),
    (["llm", "--results-dir", "afile"], ["--results-dir", "afile"]),
    # profile
    (["profile", "--batch-sizes", "a,b"], ["--batch-sizes='a,b'", "increasing"]),
    (["profile", "--batch-sizes", "4,2"], ["--batch-sizes='4,2'", "increasing"]),
    (["profile", "--batch-sizes", "0,2"], ["--batch-sizes='0,2'"]),
    (["profile", "--min-time-s", "0"], ["--min-time-s", "'0'", "> 0"]),
    (["profile", "--width", "-1"], ["--width", "'-1'", "> 0"]),
    (["profile", "--depth", "0"], ["--depth", "'0'", ">= 1"]),
    (["profile", "--threads", "0"], ["--threads", "'0'", ">= 1"]),
    (["profile", "--model", "nope"], ["--model='nope'", "resnet50"]),
    (["profile", "--device", "bogus"], ["--device='bogus'", "cpu"]),
    (["profile", "--model-kwargs", "[1]"], ["--model-kwargs", "mapping"]),
    (["profile", "--out", ADIR], ["--out", ADIR, "folder"]),
    # roundtrip
    (["roundtrip", "--episodes", "0"], ["--episodes", "'0'", ">= 1"]),
    (["roundtrip", "--load", "0"], ["--load", "'0'", "> 0"]),
    (["roundtrip", "--horizon-requests", "0"], ["--horizon-requests", "'0'"]),
    (["roundtrip", "--repeats", "-2"], ["--repeats", "'-2'"]),
    (["roundtrip", "--out", "afile"], ["--out", "afile", "folder"]),
    # benchmark
    (["benchmark"], ["--policy is required"]),
    (
        ["benchmark", "--policy", "greedy", "--tasks", "nope"],
        ["task='nope' is unknown", "Bursty-v0"],
    ),
    (["headroom", "--tasks", "nope"], ["nope"]),
    (["headroom", "--seeds", "0"], ["--seeds", "'0'"]),
    (["headroom", "--planner-seeds", "0"], ["--planner-seeds", "'0'"]),
    (["headroom", "--top", "0"], ["--top", "'0'"]),
    (["clock-sensitivity", "--tasks", "Bursty-v0"], ["--tasks='Bursty-v0'", "LLMClockBursts-v0"]),
    (["clock-sensitivity", "--power-models", "alpha=9"], ["--power-models='alpha=9'", "alpha=3"]),
    (["clock-sensitivity", "--jobs", "0"], ["--jobs", "'0'"]),
    (["clock-latency", "--latencies", "-5"], ["--latencies", "'-5'", "milliseconds"]),
    (["clock-latency", "--seeds", "1"], ["--seeds", "'1'"]),
    (["clock-latency", "--tasks", "nope"], ["--tasks='nope'", "LLMClockQwenH200-v0"]),
    (["benchmark", "--policy", "bogus"], ["--policy='bogus' is unknown", "greedy"]),
    (["benchmark", "--policy", "greedy", "--horizon-requests", "0"], ["--horizon-requests", "'0'"]),
    (["benchmark", "--policy", "ppo:/nonexistent/run"], ["/nonexistent/run"]),
    (["benchmark", "--only", "greedy"], ["--only and --resume are for --references"]),
    (["benchmark", "--resume"], ["--only and --resume are for --references"]),
    (
        ["benchmark", "--references", "--tasks", "batch_env/Trace-v0", "--only", "greedy,lazy"],
        ["--only='greedy,lazy'", "['lazy']", "triton-best"],
    ),
    (["benchmark", "--references", "--merge"], ["--merge is for --references --only"]),
    # bench
    (["bench", "--steps", "0"], ["--steps", "'0'", ">= 1"]),
    (["bench", "--repeats", "0"], ["--repeats", "'0'", ">= 1"]),
    (["bench", "--vector-sizes", "0,1"], ["--vector-sizes='0,1'", "positive"]),
    (["bench", "--vector-sizes", "a"], ["--vector-sizes='a'", "positive"]),
    (["bench", "--out", "afile"], ["--out", "afile", "folder"]),
    # data (issue 18): user mistakes only; nothing is downloaded or written
    (["data"], ["batch-env data", "required"]),
    (["data", "bogus"], ["invalid choice", "'bogus'"]),
    (["data", "fetch"], ["name"]),
    (["data", "fetch", "bogus"], ["'bogus' is unknown", "known datasets", "azure-conv-2023"]),
    (["data", "fetch", "azure-conv-2023", "--sha256", "xyz"], ["sha256='xyz'", "64 hexadecimal"]),
    (["data", "fetch", "azure-conv-2023", "--sha256", "0" * 64], ["differs from the registry"]),
    (["data", "list", "--nope"], ["--nope"]),
    # no subcommand, unknown option
    ([], ["command"]),
    (["evaluate", "--bogus-option"], ["--bogus-option"]),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working folder holding only the bad input files."""
    for name, content in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    (tmp_path / ADIR).mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def listing(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its content (None for folders)."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


def run_cli(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors
        return exc.code


def check_error(err: str, words: list[str]) -> None:
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in err
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"


def test_the_cases_cover_every_subcommand():
    from experiments.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {argv[0] for argv, _ in CASES if argv} == set(sub.choices)
    assert len(CASES) >= 140


@pytest.mark.parametrize(("argv", "words"), CASES, ids=[" ".join(a) or "(none)" for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, words, workdir, capsys):
    before = listing(workdir)
    code = run_cli(argv)
    out, err = capsys.readouterr()
    assert code == 2, f"exit status {code}; stderr: {err}"
    check_error(err, words)
    assert out == ""
    assert listing(workdir) == before


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["train", "--n-timesteps", "-5"], ["--n-timesteps", "'-5'"]),
        (["compare", "--config", "bad.yaml"], ["bad.yaml", "invalid YAML"]),
    ],
)
def test_the_console_command_exits_2(argv, words, workdir):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    before = listing(workdir)
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    check_error(proc.stderr, words)
    assert listing(workdir) == before
