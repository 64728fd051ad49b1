"""The settings of a training run, each defined once (issue 65, item 5).

A :class:`Setting` holds one setting's name, its default for a new run, what it is (its
help), whether it is a count and its least value, whether the CLI gives it as a flag, and
what a sweep's YAML does with it. Everything else is made from :data:`SETTINGS`:

* :func:`agents.train.train`'s tables: the run's settings (``RUN_SETTINGS``, in this
  order), their defaults (``DEFAULTS``), the counts and their least values, and the one a
  resumed run may change (``n_timesteps``);
* ``batch-env train``'s options, their help with the default, and the options that
  ``--sweep`` refuses (``experiments/train.py``);
* the run's record, ``config.yaml``'s ``args`` (every setting, as the run used it).

:class:`agents.train.TrainArgs` declares the settings as typed fields that default to
``None``, "not given": a new run takes the default here, a resumed run its saved value.
``tests/test_settings.py`` finds every definition of a default and holds that there is
one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .common import ALGO_NAMES
from .wrappers import DEFAULT_CENTERING_GAIN

#: what every option's help adds after its default
KEPT = "; --resume keeps the run's own"


@dataclass(frozen=True)
class Setting:
    """One setting of a training run (module docstring).

    :param name: the setting (a field of :class:`agents.train.TrainArgs`, a key of
        ``config.yaml``'s ``args``; the CLI option is ``--`` + its dashed name).
    :param default: a new run's value when it is not given.
    :param help: what it is, for ``--help`` and the docs (without the default).
    :param default_text: how the default reads where it is not the value itself (e.g.
        "the hyperparameter file's"); ``None``: the value.
    :param low: a count's least value (``None``: not a count).
    :param flag: the CLI gives it as a flag (given: ``True``; left out: not given).
    :param sweep: the sweep YAML field that sets it instead (``train --sweep`` refuses the
        option), or in parentheses why the option does not combine with ``--sweep``.
    :param resumable: a resumed run may change it (a larger ``n_timesteps``).
    :param choices: the allowed values, where they are a list.
    :param metavar: the CLI's name for its value.
    """

    name: str
    default: Any
    help: str
    default_text: str | None = None
    low: int | None = None
    flag: bool = False
    sweep: str = ""
    resumable: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def option(self) -> str:
        """The ``batch-env train`` option."""
        return "--" + self.name.replace("_", "-")

    def shown_default(self) -> str:
        """The default as ``--help`` shows it."""
        if self.default_text is not None:
            return self.default_text
        if self.flag:
            return "on" if self.default else "off"
        return "{}" if self.default == {} else str(self.default)

    def cli_help(self) -> str:
        """The option's help: what it is, then ``(default ...; --resume keeps the run's own)``."""
        return f"{self.help} (default {self.shown_default()}{KEPT})"


SETTINGS: tuple[Setting, ...] = (
    Setting("algo", "ppo", "algorithm", sweep="algo", choices=ALGO_NAMES),
    Setting(
        "env_id",
        "batch_env/DynamicBatching-v0",
        "an env id or a benchmark task id, with or without batch_env/",
        sweep="env_id",
    ),
    Setting(
        "env_kwargs",
        {},
        "env kwargs mapping, e.g. '{workload: {kind: poisson, load: 0.6}}' (keyword "
        "arguments of gymnasium.make)",
        sweep="env",
    ),
    Setting(
        "hyperparams",
        None,
        "rl-zoo3 style YAML, or the name of a shipped one (ppo-node-fraction, ... of "
        "experiments/configs; ppo, a2c, ... of agents/hyperparams)",
        default_text="agents/hyperparams/<algo>.yml",
        sweep="hyperparams",
    ),
    Setting(
        "n_timesteps",
        None,
        "total env steps; with --resume a larger value extends the run; 0 only with "
        "--warm-start: the cloned policy, no RL",
        default_text="the hyperparameter file's",
        low=0,
        sweep="n_timesteps",
        resumable=True,
    ),
    Setting("seed", 0, "seed of the model and of env i (seed + i)", low=0, sweep="seeds"),
    Setting(
        "vectorized",
        False,
        "train on one Gymnasium vector env (the env's NumPy vector env when it registers "
        "one, else SyncVectorEnv) through agents.vec_env.SB3VecEnv instead of SB3's "
        "DummyVecEnv; same training otherwise",
        flag=True,
        sweep="vectorized",
    ),
    Setting(
        "num_envs",
        None,
        "training envs (lanes of the vector env with --vectorized)",
        default_text="the hyperparameter file's n_envs",
        low=1,
        sweep="num_envs",
        metavar="N",
    ),
    Setting(
        "vector_mode",
        "auto",
        "with --vectorized: auto (vector_entry_point when the env registers one, else "
        "sync), sync or vector_entry_point",
        sweep="(a trial takes the default)",
        choices=("auto", "sync", "vector_entry_point"),
    ),
    Setting(
        "centering_gain",
        DEFAULT_CENTERING_GAIN,
        "g of average-reward centring: greedy (greedy's measured cost rate), best-constant "
        "(a benchmark task's stored best constant action's cost rate), smdp, online "
        "or a number (cost per second); on an env that draws its load per episode "
        "(batch_env/AnyLoad-v0, NodeAnyLoad-v0) also greedy-by-load, lazy-by-load "
        "(node-level) or smdp-by-load, a gain per load read at the policy's load estimate "
        "each step; on any DynamicBatching workload (traces, bursts) smdp-by-rate, the SMDP "
        "gain at the observed rate as if Poisson",
        default_text=f"{DEFAULT_CENTERING_GAIN}, or the gain the hyperparameter file gives "
        "agents.wrappers.CenteredReward",
        sweep="centering_gain",
    ),
    Setting("device", "auto", "torch device: auto, cpu or cuda", sweep="(trials train on the CPU)"),
    Setting(
        "threads",
        1,
        "torch threads (torch.set_num_threads, recorded in the config)",
        low=1,
        sweep="(one thread per trial)",
    ),
    Setting(
        "checkpoint_freq",
        50_000,
        "save a checkpoint every N env steps",
        low=1,
        sweep="(one checkpoint at the end)",
        metavar="N",
    ),
    Setting(
        "eval_freq",
        50_000,
        "evaluate every N env steps, deterministic and sampled actions on held-out seeds, "
        "and once at the end: the run then acts in the mode that scored better there "
        "(final_evaluation.json's acting; load_policy's default); 0: never, the run acts "
        "deterministically",
        low=0,
        sweep="(one evaluation at the end, eval_episodes)",
        metavar="N",
    ),
    Setting(
        "eval_episodes", 3, "episodes per evaluation", low=1, sweep="eval_episodes", metavar="N"
    ),
    Setting(
        "eval_seed",
        100_000,
        "first seed of the evaluation episodes, held out from training",
        low=0,
        sweep="(a trial takes the default)",
    ),
    Setting(
        "eval_horizon_requests",
        None,
        "requests in each evaluation episode (the periodic ones, --keep-best's choice and the "
        "final one), e.g. longer than training's, so that a checkpoint is judged on more of "
        "the input",
        default_text="the training env's horizon_requests",
        low=1,
        sweep="(a trial evaluates on the training env's episodes)",
        metavar="N",
    ),
    Setting(
        "warm_start",
        None,
        "clone a baseline before RL (agents.warm_start): '{policy: <baseline>, params: "
        "{...}, steps: 100000, epochs: 10, dagger: 0}' runs the baseline on the training "
        "envs for steps env steps and fits the actor to its actions and the critic to its "
        "discounted rewards for epochs passes; dagger: K then distils it (DAgger): K rounds "
        "in which the clone acts for steps more steps, the baseline labels the states it "
        "visits (e.g. policy: rollout, the lookahead planner) and the clone is fitted to "
        "every label; writes warm_start.json in the run",
        default_text="none",
        sweep="(trials start from scratch)",
        metavar="YAML",
    ),
    Setting(
        "keep_best",
        False,
        "end with the model of the best periodic evaluation (reward rate on the held-out "
        "evaluation seeds, in the better of its two modes; the starting model, e.g. a "
        "--warm-start clone, included) instead of the last; needs --eval-freq > 0; "
        "final_evaluation.json's kept_best says which was kept",
        flag=True,
        sweep="(a trial keeps its last model)",
    ),
)

#: the settings by name
BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
#: a new run's settings when not given (None: from the hyperparameter file)
DEFAULTS: dict[str, Any] = {s.name: s.default for s in SETTINGS}


def settings_doc() -> str:
    """Every setting, its default and what it is, as text (``TrainArgs``'s docs)."""
    return "\n".join(f"* ``{s.name}`` [{s.shown_default()}]: {s.help}." for s in SETTINGS)
