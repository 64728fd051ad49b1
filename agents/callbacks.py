"""SB3 callbacks: serving metrics, optimality gap and periodic evaluation in TensorBoard.

Tags (grouped as in CleanRL, mirroring ``info["serving"]``):

* ``serving/<key>``: every numeric key of ``info["serving"]`` of the training episodes
  that ended since the last dump (mean), e.g. ``serving/latency_p99_ms``,
  ``serving/power_mean_w``, ``serving/sla_attainment``, ``serving/reward_rate_per_s``.
* ``rollout/ep_reward_rate_per_s`` beside SB3's ``rollout/ep_rew_mean``: the mean reward
  rate per second (minus the serving cost per second, the figure every result reports)
  of the last 100 training episodes, the same window as ``ep_rew_mean``, whose rewards
  are the shaped ones the algorithm learns from (centred: ``r + g dt``; see
  ``batch_env.wrappers.AverageRewardCentering``); on a benchmark task also
  ``rollout/ep_normalized_score``.
* ``reward_components/<latency|energy|sla|drop>``: mean raw component per step.
* ``train/centering_gain``: the g of average-reward centring in use.
* ``optimality/smdp_gain`` and ``optimality/gap`` (percent above the bound's cost rate)
  on ``DynamicBatching-v0`` and the benchmark tasks built on it with SLA weight 0: the
  SMDP optimum under Poisson arrivals, the phase-aware optimum under MMPP arrivals.
* ``optimality/normalized_score`` on a benchmark task made with its own settings: 0 at
  greedy's stored reward rate, 1 at the bound's (``batch_env.tasks.normalized_score``),
  per *training* episode (the stochastic policy, as it learns). ``eval/normalized_score``
  is the figure ``batch-env train`` prints at the end: the final model on the held-out
  evaluation episodes, paired with greedy on them.
* ``eval/deterministic/<key>`` and ``eval/stochastic/<key>``: periodic evaluation on a
  separate env with fixed seeds (and, where the env draws its load per episode, fixed
  loads spread over its range), plus ``optimality/gap_eval_deterministic``; on an env
  that is not ours (no serving summary, e.g. CartPole-v1) the keys are ``return`` and
  ``steps``. A run may stop at the first evaluation that meets a target
  (``PeriodicEvaluation``'s ``stop_when``; ``batch-env bench --wallclock`` uses it).
* hyperparameters as TensorBoard HParams.

:class:`Checkpoints` saves the model and its normalization statistics every
``checkpoint_freq`` steps, each file atomically (statistics first), so a kill never
leaves a half-written checkpoint that looks whole.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import HParam

from batch_env import MAX_EPISODE_STEPS, EpisodeCut, evaluate, paired_difference
from batch_env.core import is_serving_env
from batch_env.metrics import HEADLINE_KEYS

from .common import AgentPolicy
from .files import atomic_save, atomic_write_text, read_json
from .wrappers import reference_baseline

EVAL_KEYS = HEADLINE_KEYS
#: training episodes the ``rollout/`` serving figures average over (SB3's
#: ``stats_window_size`` default, the window of ``rollout/ep_rew_mean``)
ROLLOUT_WINDOW = 100
#: what an evaluation records on an env without a serving summary (e.g. CartPole-v1)
OTHER_ENV_KEYS = ("return", "steps")
COMPONENTS = ("latency", "energy", "sla", "drop")


def gap_percent(reward_rate_per_s: float, smdp_gain: float) -> float:
    """How far a policy's cost rate is above the SMDP optimum, in percent."""
    return 100.0 * (-reward_rate_per_s - smdp_gain) / smdp_gain


class ServingMetricsCallback(BaseCallback):
    """Log ``serving/``, ``reward_components/``, ``optimality/`` tags and hyperparameters.

    :param smdp_gain: the bound's cost per second, or ``None`` where there is none.
    :param hparams: hyperparameters to log as HParams.
    :param score_reference: ``(greedy's reward rate, the bound's)`` of a benchmark task,
        for ``optimality/normalized_score``; ``None`` elsewhere.
    """

    def __init__(
        self,
        smdp_gain: float | None = None,
        hparams: dict[str, Any] | None = None,
        score_reference: tuple[float, float] | list[float] | None = None,
    ) -> None:
        super().__init__()
        self.smdp_gain = smdp_gain
        self.score_reference = None if score_reference is None else tuple(score_reference)
        self.hparams = hparams or {}
        self.episodes = 0
        #: the reward rates of the last :data:`ROLLOUT_WINDOW` training episodes
        self.rates: deque[float] = deque(maxlen=ROLLOUT_WINDOW)

    def _on_training_start(self) -> None:
        flat = {
            k: (v if isinstance(v, (int, float, str, bool)) else str(v))
            for k, v in self.hparams.items()
        }
        metrics = {"serving/reward_rate_per_s": 0.0}
        if self.smdp_gain is not None:
            metrics["optimality/gap"] = 0.0
        self.logger.record(
            "hparams", HParam(flat, metrics), exclude=("stdout", "log", "json", "csv")
        )

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            comps = info.get("reward_components")
            if comps:
                for k in COMPONENTS:
                    self.logger.record_mean(f"reward_components/{k}", float(comps[k]))
            if "centering_gain" in info:
                self.logger.record("train/centering_gain", float(info["centering_gain"]))
            serving = info.get("serving")
            if serving:
                self.episodes += 1
                if math.isfinite(serving.get("reward_rate_per_s", math.nan)):
                    self.rates.append(float(serving["reward_rate_per_s"]))
                for k, v in serving.items():
                    if isinstance(v, (int, float)) and math.isfinite(v):
                        self.logger.record_mean(f"serving/{k}", float(v))
                if self.smdp_gain is not None:
                    self.logger.record("optimality/smdp_gain", self.smdp_gain)
                    self.logger.record_mean(
                        "optimality/gap", gap_percent(serving["reward_rate_per_s"], self.smdp_gain)
                    )
                if self.score_reference is not None:
                    low, top = self.score_reference
                    score = (serving["reward_rate_per_s"] - low) / (top - low)
                    self.logger.record_mean("optimality/normalized_score", score)
        return True

    def _on_rollout_end(self) -> None:
        """Record ``rollout/ep_reward_rate_per_s`` (and the normalized score) for the
        dump that follows, beside SB3's ``rollout/ep_rew_mean``."""
        if not self.rates:
            return
        rate = float(np.mean(self.rates))
        self.logger.record("rollout/ep_reward_rate_per_s", rate)
        if self.score_reference is not None:
            low, top = self.score_reference
            self.logger.record("rollout/ep_normalized_score", (rate - low) / (top - low))


def checkpoint_paths(folder: Path, steps: int) -> tuple[Path, Path]:
    """The model file and the normalization statistics of the checkpoint at ``steps``
    (SB3's ``CheckpointCallback`` names: ``model_<steps>_steps.zip``,
    ``model_vecnormalize_<steps>_steps.pkl``)."""
    return folder / f"model_{steps}_steps.zip", folder / f"model_vecnormalize_{steps}_steps.pkl"


class Checkpoints(BaseCallback):
    """Save a checkpoint every ``save_freq`` calls (``checkpoint_freq // n_envs``), like
    SB3's ``CheckpointCallback`` with ``save_vecnormalize``, but each file atomically and
    the statistics before the model: a checkpoint's model file exists only once both
    are complete.

    :param save_freq: save every this many calls of the callback (env steps / n_envs).
    :param folder: the run's ``checkpoints/`` folder.
    """

    def __init__(self, save_freq: int, folder: Path) -> None:
        super().__init__()
        self.save_freq, self.folder = save_freq, Path(folder)

    def _init_callback(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)

    def save_now(self) -> Path:
        """Save the checkpoint at the model's current step count; return its model file."""
        self.folder.mkdir(parents=True, exist_ok=True)
        model_path, vn_path = checkpoint_paths(self.folder, int(self.model.num_timesteps))
        vn = self.model.get_vec_normalize_env()
        if vn is not None:
            atomic_save(vn_path, lambda tmp: vn.save(str(tmp)))
        atomic_save(model_path, self.model.save)
        return model_path

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq == 0:
            self.save_now()
        return True


class SemiMarkovDiscount(BaseCallback):
    """Discount each step by the time it took: ``exp(-dt / horizon_s)``, not one ``gamma``
    per step (an SMDP's discounting, Bradtke & Duff 1995), for on-policy algorithms
    (PPO, A2C, MaskablePPO, RecurrentPPO).

    A batching env's steps last from milliseconds (one decode iteration of a small batch)
    to seconds (a whole batch or a long prefill). With one discount per step, a policy
    that makes its steps short (a low cap on the LLM envs: 10 ms a step against 0.3-0.5 s
    at vLLM's cap) also shortens, in seconds, the future it is charged for: the queue that
    builds behind a low cap is discounted away, and learning that prefers short steps
    makes itself ever more short-sighted (the collapse of docs/results/agents-llm.md).
    Discounting by time keeps the horizon at ``horizon_s`` seconds whatever the policy does.

    The callback records each step's ``info["dt_s"]`` and replaces the rollout buffer's
    GAE with one whose discount at step t is ``exp(-dt_t / horizon_s)``; GAE's lambda stays
    per step. SB3's bootstrap of a truncated episode's last reward keeps the algorithm's
    ``gamma`` (one step per episode). The mean discount per step is logged as
    ``train/step_discount``.

    :param horizon_s: the discount's time constant in seconds (finite, > 0): a reward
        ``horizon_s`` seconds ahead weighs ``1/e`` of one now.
    """

    def __init__(self, horizon_s: float) -> None:
        super().__init__()
        if (
            isinstance(horizon_s, bool)
            or not isinstance(horizon_s, (int, float))
            or not math.isfinite(horizon_s)
            or horizon_s <= 0
        ):
            raise ValueError(
                f"SemiMarkovDiscount: horizon_s={horizon_s!r} is invalid: expected a finite number > 0 (seconds)"
            )
        self.horizon_s = float(horizon_s)
        self.discounts: np.ndarray | None = None

    def _on_training_start(self) -> None:
        buf = getattr(self.model, "rollout_buffer", None)
        if buf is None or not hasattr(buf, "gae_lambda"):
            raise ValueError(
                f"SemiMarkovDiscount: {type(self.model).__name__} has no on-policy rollout buffer; "
                "it fits PPO, A2C, MaskablePPO and RecurrentPPO"
            )
        self.discounts = np.ones((buf.buffer_size, buf.n_envs), dtype=np.float32)
        discounts = self.discounts

        def compute_returns_and_advantage(last_values: Any, dones: np.ndarray) -> None:
            # SB3's GAE (RolloutBuffer.compute_returns_and_advantage) with a discount per step
            last = last_values.clone().cpu().numpy().flatten()
            gae = np.zeros(buf.n_envs, dtype=np.float32)
            for step in reversed(range(buf.buffer_size)):
                if step == buf.buffer_size - 1:
                    non_terminal, next_values = 1.0 - dones.astype(np.float32), last
                else:
                    non_terminal = 1.0 - buf.episode_starts[step + 1]
                    next_values = buf.values[step + 1]
                g = discounts[step]
                delta = buf.rewards[step] + g * next_values * non_terminal - buf.values[step]
                gae = delta + g * buf.gae_lambda * non_terminal * gae
                buf.advantages[step] = gae
            buf.returns = buf.advantages + buf.values

        buf.compute_returns_and_advantage = compute_returns_and_advantage

    def _on_step(self) -> bool:
        assert self.discounts is not None
        infos = self.locals.get("infos", [])
        dts = []
        for i, info in enumerate(infos):
            dt = info.get("dt_s")
            if not isinstance(dt, (int, float)) or not math.isfinite(dt) or dt < 0:
                raise ValueError(
                    f"SemiMarkovDiscount: env {i}'s step info has dt_s={dt!r}: expected the step's "
                    "duration in seconds (a finite number >= 0), as the batching envs give"
                )
            dts.append(float(dt))
        # the step is stored at the buffer's next position, after this call
        pos = cast(Any, self.model).rollout_buffer.pos
        self.discounts[pos] = np.exp(-np.asarray(dts) / self.horizon_s)
        self.logger.record_mean("train/step_discount", float(self.discounts[pos].mean()))
        return True


def eval_load_grid(env: Any, n_episodes: int) -> list[float] | None:
    """For an env that draws its load per episode (a workload with a ``load_range``): the
    loads its ``n_episodes`` evaluation episodes run at, the midpoints of ``n_episodes``
    equal cells of the range (as the benchmark's grid: the mean over them is a quadrature
    of the uniform load, and each episode's bound is known); ``None`` for other envs."""
    from batch_env.tasks import load_grid

    rng = getattr(getattr(env.unwrapped, "workload", None), "load_range", None)
    return None if rng is None else list(load_grid(rng[0], rng[1], n_episodes, 1))


class PeriodicEvaluation(BaseCallback):
    """Evaluate the current model every ``eval_freq`` steps on fixed seeds.

    Both the deterministic and the stochastic policy are evaluated on a separate raw env
    through :func:`batch_env.evaluate`, with the training run's current observation
    statistics. Results are logged and appended to ``<run_dir>/evaluations.json``. On an
    env that draws its load per episode the episodes run at fixed loads spread over the
    range (:func:`eval_load_grid`), and the gap is against the mean of the bound at those
    loads: drawn loads would make two evaluations' figures, and their gap against a
    load-averaged bound, differ by the loads drawn rather than by the policy.

    Each record holds ``timesteps``, ``loads`` (on a drawn-load env: the episodes'
    loads; the CIs are then the spread between loads, not noise), per mode
    ``{key: [mean, ci95]}`` for the headline keys (``return`` and ``steps`` on an env without a serving summary) and
    ``gap_percent`` where there is a bound, and the wall-clock of this process's
    ``learn()`` when the evaluation began: ``wall_s`` (seconds since training started,
    earlier evaluations included), ``train_s`` (the same without the time spent in
    evaluations) and ``eval_s`` (this evaluation's own seconds).

    With ``stop_when``, training stops at the first evaluation whose record it accepts
    (``stopped`` is then True): the callback returns False, which ends SB3's ``learn()``.

    An evaluation episode is cut at :data:`EVAL_STEPS_FACTOR` times the steps the env's
    reference baseline (``compare_with_reference``'s) takes on the longest of the same
    episodes (at least :data:`EVAL_MIN_STEPS`, at most :data:`batch_env.MAX_EPISODE_STEPS`,
    the bound of every evaluation): a model
    that starves the server (an LLM cap of 1: the queue grows for ever) would otherwise
    run each episode to the step net of a million steps and then fail the run. A cut
    mode's record is ``{"unfinished": {"seed", "steps", "max_steps"}}`` (the stochastic
    mode is not run after a cut deterministic one: ``{"unfinished": {"skipped": true}}``),
    its score is minus infinity (:func:`eval_score`), and training goes on.

    With ``keep_best`` (a folder), the model is also evaluated when training starts (after
    a warm start: the cloned policy is a candidate), and the model and its observation
    statistics of the best evaluation so far (:func:`eval_score`: the deterministic
    policy's mean reward rate, or return on an env without a serving summary; a later
    one wins only when strictly better) are saved there with ``best.json``
    (``timesteps``, ``score``), which a resumed run reads back. ``train`` then keeps
    that model (``agents.train``'s ``keep_best`` setting).

    :param env_id: env id.
    :param env_kwargs: env kwargs of the evaluation env (the training ones).
    :param specs: the run's wrapper specs.
    :param eval_freq: evaluate every this many environment steps (all envs together).
    :param n_episodes: episodes per evaluation.
    :param seed: first evaluation seed (held out from training seeds).
    :param run_dir: where ``evaluations.json`` goes.
    :param smdp_gain: SMDP optimum's cost rate, for the gap.
    :param stop_when: called with each periodic evaluation's record; True stops training.
    :param keep_best: folder for the best evaluation's model (None: not kept).
    """

    def __init__(
        self,
        env_id: str,
        env_kwargs: dict[str, Any],
        specs: list[tuple[str, dict[str, Any]]],
        eval_freq: int,
        n_episodes: int,
        seed: int,
        run_dir: Path,
        smdp_gain: float | None = None,
        stop_when: Callable[[dict[str, Any]], bool] | None = None,
        keep_best: Path | None = None,
    ) -> None:
        super().__init__()
        import gymnasium as gym

        self.env = gym.make(env_id, **env_kwargs)
        self.env_id, self.env_kwargs, self.specs = env_id, env_kwargs, specs
        self.eval_freq, self.n_episodes, self.seed = eval_freq, n_episodes, seed
        self.path = Path(run_dir) / "evaluations.json"
        self.smdp_gain = smdp_gain
        self.loads = eval_load_grid(self.env, n_episodes)
        if self.loads is not None and smdp_gain is not None:
            from baselines.smdp import gains_at_loads

            # the bound at the very loads evaluated: the gap is then the protocol's
            self.smdp_gain = float(np.mean(gains_at_loads(self.env, self.loads)))
        self.history: list[dict[str, Any]] = []
        #: the last evaluation's results per mode (``deterministic``, ``stochastic``; None
        #: where it was cut)
        self._last: dict[str, Any] = {}
        #: the reference baseline's evaluation on the same episodes, once run
        self._reference: Any = None
        #: the evaluation episodes' step bound (None: not known yet)
        self.max_steps: int | None = None
        if self.path.exists():  # a resumed run: keep its history unless the file is damaged
            self.history = (
                read_json(self.path, "starting a new evaluation history", _check_history) or []
            )
        self._next: int | None = None
        self.stop_when = stop_when
        self.stopped = False
        self._t0 = time.perf_counter()
        self._eval_s = 0.0  # seconds spent in evaluations since training started
        self._cpu0 = time.process_time()
        self._eval_cpu_s = 0.0  # this process's CPU seconds spent in evaluations
        #: the learning curves' reference lines, evaluated once (:meth:`curve_references`)
        self._curve_refs: dict[str, float] | None = None
        self.keep_best = None if keep_best is None else Path(keep_best)
        #: ``{"timesteps", "score"}`` of the kept model (None: none kept yet)
        self.best: dict[str, Any] | None = None
        if self.keep_best is not None and (self.keep_best / "best.json").exists():
            self.best = read_json(self.keep_best / "best.json", "keeping a new best", _check_best)
            if self.best_record() is None:  # gone with a damaged history: choose anew
                self.best = None

    def _on_training_start(self) -> None:
        self._t0 = time.perf_counter()
        self._eval_s = 0.0
        self._cpu0 = time.process_time()
        self._eval_cpu_s = 0.0
        if self.keep_best is not None and not any(
            r["timesteps"] == self.num_timesteps for r in self.history
        ):
            self.evaluate_now()  # the starting model (a warm start's clone) is a candidate

    def _policy(self, deterministic: bool) -> AgentPolicy:
        vn = self.model.get_vec_normalize_env()
        return AgentPolicy(
            self.model,
            self.env_id,
            self.env_kwargs,
            self.specs,
            obs_normalizer=vn,
            deterministic=deterministic,
        )

    def evaluate_now(self, final: bool = False) -> dict[str, Any]:
        """Run the evaluation, log it and return the record.

        :param final: the run's last evaluation: the stochastic policy is evaluated even
            where the deterministic one's episodes were cut (a periodic evaluation skips
            it then, so that training goes on).
        """
        start = time.perf_counter()
        cpu0 = time.process_time()
        record: dict[str, Any] = {
            "timesteps": int(self.num_timesteps),
            "wall_s": start - self._t0,
            "train_s": start - self._t0 - self._eval_s,
            "cpu_s": cpu0 - self._cpu0 - self._eval_cpu_s,
            **({} if self.loads is None else {"loads": self.loads}),
        }
        bound = self.step_bound()
        for mode, det in (("deterministic", True), ("stochastic", False)):
            self._last[mode] = None
            if unfinished(record) and not final:
                record[mode] = {"unfinished": {"skipped": True}}
                continue
            try:
                res = self._last[mode] = evaluate(
                    self._policy(det),
                    self.env,
                    n_episodes=self.n_episodes,
                    seed=self.seed,
                    max_steps=bound,
                    options=None if self.loads is None else [{"load": x} for x in self.loads],
                )
            except EpisodeCut as cut:
                record[mode] = {
                    "unfinished": {
                        "seed": cut.seed,
                        "steps": cut.steps,
                        "max_steps": bound,
                        **({"partial": cut.partial} if cut.partial else {}),
                    }
                }
                self.logger.record(f"eval/{mode}/unfinished", 1)
                continue
            keys = EVAL_KEYS if "reward_rate_per_s" in res.episodes[0] else OTHER_ENV_KEYS
            record[mode] = {k: (res.mean(k), res.ci95(k)) for k in keys}
            for k in keys:
                self.logger.record(f"eval/{mode}/{k}", res.mean(k))
            if self.smdp_gain is not None:
                gap = gap_percent(res.mean("reward_rate_per_s"), self.smdp_gain)
                record[mode]["gap_percent"] = gap
                self.logger.record(f"optimality/gap_eval_{mode}", gap)
        self._log_curves(record)
        record["eval_s"] = time.perf_counter() - start
        self._eval_s += record["eval_s"]
        self._eval_cpu_s += time.process_time() - cpu0
        self.history.append(record)
        atomic_write_text(self.path, json.dumps(self.history, indent=1))
        if (
            self.keep_best is not None
            and not unfinished(record)
            and (self.best is None or eval_score(record) > self.best["score"])
        ):
            self._save_best(record)
        return record

    def curve_references(self) -> dict[str, float]:
        """The learning curves' reference lines, each policy's mean reward rate on the
        evaluation episodes (run once): the env's reference baseline (greedy; vLLM's
        default cap on an LLM env), and on a benchmark task the best constant action
        (``tasks_references.json``'s ``best_constant``, from ``batch-env headroom``) and
        the task's best stored reference policy with its parameters (called where the
        evaluations have a reward rate)."""
        if self._curve_refs is not None:
            return self._curve_refs
        self._curve_refs = {}
        import baselines
        from batch_env import tasks

        key = "reward_rate_per_s"
        self._curve_refs[reference_baseline(self.env)] = self._reference_result().mean(key)
        ref = tasks.references().get(str(getattr(self.env.unwrapped, "task", None)))
        if ref is not None:
            top = ref["policies"][ref["best_policy"]]
            made = {"task_reference": (top["policy"], dict(top.get("params", {})))}
            if "best_constant" in ref:
                made["best_constant"] = ("constant", {"action": ref["best_constant"]["action"]})
            for label, (name, params) in made.items():
                res = evaluate(
                    baselines.make(name, env=self.env, **params),
                    self.env,
                    n_episodes=self.n_episodes,
                    seed=self.seed,
                    max_steps=self.step_bound(),
                    options=None if self.loads is None else [{"load": x} for x in self.loads],
                )
                self._curve_refs[label] = res.mean(key)
        return self._curve_refs

    def _log_curves(self, record: dict[str, Any]) -> None:
        """The held-out reward rate of the mode the run would act in, beside the
        reference lines (:meth:`curve_references`), against env steps (``curve/``) and
        against this process's CPU seconds of training (``curve_cpu_s/``: TensorBoard's
        step is the CPU second)."""
        score = _mode_score(record, acting_mode(record))
        mode = record.get(acting_mode(record))
        if score is None or not isinstance(mode, dict) or "reward_rate_per_s" not in mode:
            return  # cut episodes, or an env without a serving summary
        lines = {"agent": score, **self.curve_references()}
        record["curve"] = lines  # (evaluations.json: what `batch-env curves` plots)
        writers = [
            f.writer for f in self.logger.output_formats if hasattr(f, "writer")
        ]  # TensorBoardOutputFormat's SummaryWriter
        cpu = int(round(record["cpu_s"]))
        for w in writers:  # written at once: SB3's logger keeps one value a tag per dump
            for label, value in lines.items():
                w.add_scalar(f"curve/{label}/reward_rate_per_s", value, record["timesteps"])
                w.add_scalar(f"curve_cpu_s/{label}/reward_rate_per_s", value, cpu)
            w.flush()

    def _reference_result(self) -> Any:
        """The reference baseline's evaluation on the evaluation episodes (run once)."""
        if self._reference is None:
            import baselines

            self._reference = evaluate(
                baselines.make(reference_baseline(self.env), env=self.env),
                self.env,
                n_episodes=self.n_episodes,
                seed=self.seed,
                options=None if self.loads is None else [{"load": x} for x in self.loads],
            )
        return self._reference

    def step_bound(self) -> int:
        """The evaluation episodes' step bound (class docstring): from the reference
        baseline's longest episode on an env with a serving summary, else
        :data:`batch_env.MAX_EPISODE_STEPS`."""
        if self.max_steps is None:
            if not is_serving_env(self.env):
                self.max_steps = MAX_EPISODE_STEPS
            else:
                ref = max(int(ep["steps"]) for ep in self._reference_result().episodes)
                self.max_steps = int(
                    min(max(EVAL_STEPS_FACTOR * ref, EVAL_MIN_STEPS), MAX_EPISODE_STEPS)
                )
        return self.max_steps

    def compare_with_reference(
        self, score_reference: Any = None, mode: str | None = None
    ) -> dict[str, Any] | None:
        """The last evaluation's agent in ``mode`` (default: deterministic, its stochastic
        one where the deterministic episodes were cut; ``agent_mode``) against the env's reference baseline
        on the same episodes (seeds and loads): greedy, or on an LLM env the static cap
        at ``max_num_seqs`` (vLLM's default), the policies the default centring gain and
        a task's normalized score start from. Returns ``{"policy", "reward_rate_per_s":
        [mean, ci95], "difference": [mean, ci95]}`` (agent minus reference, paired per
        seed; higher is better), with ``"normalized_score"`` when ``score_reference``
        (a task's ``(greedy, top)`` rates) is given: the paired difference over the
        task's span from greedy to its bound or best reference, an estimate of the
        score on these episodes (the protocol's figure: ``batch-env benchmark``); None
        on an env without a serving summary, or before any evaluation."""
        if mode is None or self._last.get(mode) is None:
            mode = "deterministic" if self._last.get("deterministic") is not None else "stochastic"
        agent = self._last.get(mode)  # the stochastic policy where the deterministic starved
        if agent is None or "reward_rate_per_s" not in agent.episodes[0]:
            return None
        name = reference_baseline(self.env)
        ref = self._reference_result()
        key = "reward_rate_per_s"
        diff = paired_difference(agent, ref, key)
        out: dict[str, Any] = {
            "policy": name,
            "agent_mode": mode,
            key: [ref.mean(key), ref.ci95(key)],
            "difference": list(diff),
        }
        self.logger.record(f"eval/{name}/{key}", ref.mean(key))
        if score_reference is not None:
            low, top = score_reference
            out["normalized_score"] = diff[0] / (top - low)
            out["normalized_score_ci95"] = diff[1] / (top - low)
            # the held-out estimate; optimality/normalized_score is the training episodes'
            self.logger.record("eval/normalized_score", out["normalized_score"])
        self.logger.dump(self.num_timesteps)
        return out

    def best_record(self) -> dict[str, Any] | None:
        """The evaluation record of the kept model (None: none kept, or its record gone)."""
        if self.best is None:
            return None
        return next(
            (
                r
                for r in self.history
                if r["timesteps"] == self.best["timesteps"] and eval_score(r) == self.best["score"]
            ),
            None,
        )

    def _save_best(self, record: dict[str, Any]) -> None:
        """Save the current model (statistics first) and ``best.json`` in ``keep_best``."""
        assert self.keep_best is not None
        self.keep_best.mkdir(parents=True, exist_ok=True)
        vn = self.model.get_vec_normalize_env()
        if vn is not None:
            atomic_save(self.keep_best / "vecnormalize.pkl", lambda tmp: vn.save(str(tmp)))
        atomic_save(self.keep_best / "model.zip", self.model.save)
        self.best = {"timesteps": int(record["timesteps"]), "score": eval_score(record)}
        atomic_write_text(self.keep_best / "best.json", json.dumps(self.best))

    def _on_step(self) -> bool:
        if self._next is None:
            self._next = (self.num_timesteps // self.eval_freq + 1) * self.eval_freq
        if self.num_timesteps >= self._next:
            self._next += self.eval_freq
            record = self.evaluate_now()
            if self.stop_when is not None and self.stop_when(record):
                self.stopped = True
                return False
        return True


#: an evaluation episode is cut at this many times the reference baseline's steps
EVAL_STEPS_FACTOR = 100
#: ... and never below this many steps
EVAL_MIN_STEPS = 10_000


def unfinished(record: dict[str, Any]) -> dict[str, Any] | None:
    """What cut an evaluation record's deterministic episodes (``{"seed", "steps",
    "max_steps"}``: :class:`PeriodicEvaluation`), or None when they all ended."""
    det = record.get("deterministic")
    return det.get("unfinished") if isinstance(det, dict) else None


#: the two ways a trained run may act: its policy's most likely action, or a draw from it
ACTING_MODES = ("deterministic", "stochastic")


def _mode_score(record: dict[str, Any], mode: str) -> float | None:
    """A mode's mean reward rate per second in an evaluation record (its mean return on an
    env without a serving summary); None where it was not run or its episodes were cut."""
    r = record.get(mode)
    if not isinstance(r, dict) or r.get("unfinished"):
        return None
    v = r.get("reward_rate_per_s", r.get("return"))
    return None if v is None else float(v[0])


def acting_mode(record: dict[str, Any]) -> str:
    """The mode a run acts in, chosen on its own evaluation episodes (the training's
    held-out seeds, not a benchmark's): ``stochastic`` where sampling the policy scored a
    higher mean than its most likely action, or where only the deterministic episodes
    were cut; else ``deterministic``. A policy PPO has not yet made confident is close to
    uniform over actions that rarely matter; its most likely action is then an arbitrary
    one, held at every step, while training only ever saw draws (docs/results/agents-llm.md)."""
    det, sto = _mode_score(record, "deterministic"), _mode_score(record, "stochastic")
    return "stochastic" if sto is not None and (det is None or sto > det) else "deterministic"


def eval_score(record: dict[str, Any]) -> float:
    """What ``keep_best`` maximises in an evaluation record: the mean reward rate per
    second (mean return on an env without a serving summary) of its :func:`acting_mode`;
    minus infinity when the episodes of both modes were cut or skipped."""
    score = _mode_score(record, acting_mode(record))
    return -math.inf if score is None else score


def _check_best(value: Any) -> None:
    if not (
        isinstance(value, dict)
        and isinstance(value.get("timesteps"), int)
        and isinstance(value.get("score"), (int, float))
    ):
        raise ValueError("expected a JSON object with integer timesteps and numeric score")


def _check_history(value: Any) -> None:
    if not isinstance(value, list) or not all(
        isinstance(r, dict) and "timesteps" in r for r in value
    ):
        raise ValueError("expected a JSON list of evaluation records")
