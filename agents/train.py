"""Train a Stable-Baselines3 agent on a batch_env environment, top to bottom.

``batch-env train --algo ppo --env-kwargs '{workload: {kind: poisson, load: 0.6}}'``

1. Read the hyperparameters (rl-zoo3 format, ``agents/hyperparams/<algo>.yml``).
2. Resolve the centring gain g of :class:`batch_env.wrappers.AverageRewardCentering`
   (``--centering-gain``: ``greedy`` = greedy's measured cost rate, ``smdp`` = the SMDP
   gain, ``online`` = estimated while training, or a number).
3. Build ``n_envs`` wrapped envs (``DummyVecEnv``, seeded ``seed + i``), or with
   ``--vectorized`` one Gymnasium vector env of ``n_envs`` lanes (the env's native NumPy
   vector env when it registers one, else ``SyncVectorEnv``; the wrappers' vector twins;
   lane i seeded ``seed + i``) behind :class:`agents.vec_env.SB3VecEnv` and ``VecMonitor``;
   optionally under ``VecNormalize``. Everything else is the same in both cases.
4. Train with checkpoints every ``--checkpoint-freq`` steps (model and normalization
   statistics), TensorBoard logs (``serving/``, ``reward_components/``, ``optimality/``,
   ``eval/``; see :mod:`agents.callbacks`) and periodic evaluation on held-out seeds.
5. Save ``model.zip``, ``vecnormalize.pkl`` and ``config.yaml`` in the run directory:
   the folder alone reproduces the run (``--resume`` continues it, ``agents.load_policy``
   loads it as a policy).
"""

from __future__ import annotations

import json
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .common import ZOO_KEYS, algo_class, literal, load_hyperparams, make_env, wrapper_specs

CENTERING = "batch_env.wrappers.AverageRewardCentering"
#: per-step info keys that ServingMetricsCallback reads (a vectorized run copies them to
#: every lane's info; otherwise only lanes whose episode ended report)
STEP_INFO_KEYS = ("reward_components", "centering_gain")


@dataclass
class TrainArgs:
    """Arguments of a training run (each is a ``batch-env train`` option)."""

    algo: str = "ppo"
    """ppo, a2c, dqn or ppo_mask (sb3-contrib's MaskablePPO)."""
    env_id: str = "batch_env/DynamicBatching-v0"
    """registered env id."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """keyword arguments of gymnasium.make."""
    hyperparams: str | None = None
    """rl-zoo3 style YAML (default agents/hyperparams/<algo>.yml)."""
    n_timesteps: int | None = None
    """total environment steps (default: the hyperparameter file's)."""
    seed: int = 0
    """seed of the model and of env i (seed + i)."""
    vectorized: bool = False
    """train on a Gymnasium vector env through agents.vec_env.SB3VecEnv (the env's native
    vector env when registered, else SyncVectorEnv) instead of SB3's DummyVecEnv."""
    num_envs: int | None = None
    """training envs (lanes of the vector env); default: the hyperparameter file's n_envs."""
    vector_mode: str = "auto"
    """with vectorized: auto (vector_entry_point when the env registers one, else sync),
    sync or vector_entry_point."""
    run_dir: str | None = None
    """output folder (default runs/<algo>-s<seed>-<time>)."""
    centering_gain: str = "greedy"
    """g of average-reward centring: greedy, smdp, online or a number (cost per second)."""
    device: str = "auto"
    """torch device: auto, cpu or cuda."""
    threads: int = 1
    """torch.set_num_threads (recorded in the config)."""
    checkpoint_freq: int = 50_000
    """save a checkpoint every this many steps."""
    eval_freq: int = 50_000
    """evaluate every this many steps (0: never)."""
    eval_episodes: int = 3
    """episodes per periodic evaluation."""
    eval_seed: int = 100_000
    """first seed of the evaluation episodes (held out from training)."""
    resume: bool = False
    """continue the run in run_dir from its latest checkpoint."""
    progress: bool = True
    """show a progress bar."""
    verbose: int = 0
    """SB3 verbosity."""


def resolve_gain(mode: str, env_id: str, env_kwargs: dict[str, Any], seed: int) -> float | None:
    """The centring gain g (cost per second) for ``mode`` (see :class:`TrainArgs`)."""
    import gymnasium as gym

    if mode == "online":
        return None
    if mode in ("greedy", "smdp"):
        import baselines
        from batch_env import evaluate

        env = gym.make(env_id, **env_kwargs)
        if mode == "smdp":
            from baselines.smdp import SMDPProblem, solve

            return float(solve(SMDPProblem.from_env(env)).gain)
        res = evaluate(baselines.make("greedy", env=env), env, n_episodes=3, seed=seed + 50_000)
        return -res.mean("reward_rate_per_s")
    try:
        return float(mode)
    except ValueError:
        raise ValueError(
            f"centering_gain={mode!r} is invalid: expected greedy, smdp, online or a number (cost per second)"
        ) from None


def smdp_gain_if_exact(env_id: str, env_kwargs: dict[str, Any]) -> float | None:
    """The SMDP optimum's cost rate when the env is in the SMDP-exact subset, else None."""
    if env_id != "batch_env/DynamicBatching-v0":
        return None
    import gymnasium as gym

    from baselines.smdp import SMDPProblem, is_exact_for, solve

    env = gym.make(env_id, **env_kwargs)
    if not is_exact_for(env):
        return None
    return float(solve(SMDPProblem.from_env(env)).gain)


def _latest_checkpoint(run: Path) -> tuple[Path, Path | None, int] | None:
    best = None
    for p in (run / "checkpoints").glob("model_*_steps.zip"):
        m = re.fullmatch(r"model_(\d+)_steps\.zip", p.name)
        if m and (best is None or int(m.group(1)) > best[2]):
            vn = run / "checkpoints" / f"model_vecnormalize_{m.group(1)}_steps.pkl"
            best = (p, vn if vn.exists() else None, int(m.group(1)))
    return best


def train(args: TrainArgs) -> Path:
    """Run (or resume) one training run and return its directory."""
    import torch
    from stable_baselines3.common.callbacks import CallbackList, CheckpointCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from .callbacks import PeriodicEvaluation, ServingMetricsCallback
    from .vec_env import make_vec_env as make_lane_vec_env
    from .vec_env import resolve_mode

    torch.set_num_threads(args.threads)

    # 1. the run's configuration: fresh, or the saved one when resuming
    if args.resume:
        if args.run_dir is None:
            raise ValueError("resume=True needs run_dir=<the run to continue>")
        run = Path(args.run_dir)
        from .policy import read_run_config

        cfg = read_run_config(run)
        if args.n_timesteps is not None:
            cfg["n_timesteps"] = int(args.n_timesteps)
    else:
        if args.num_envs is not None and (isinstance(args.num_envs, bool) or not isinstance(args.num_envs, int)
                                          or args.num_envs < 1):
            raise ValueError(f"num_envs={args.num_envs!r} is invalid: expected an integer >= 1")
        run = Path(args.run_dir or f"runs/{args.algo}-s{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}")
        if (run / "config.yaml").exists():
            raise FileExistsError(f"run directory {str(run)!r} already holds a run: use --resume or another --run-dir")
        hp = load_hyperparams(args.algo, args.env_id, args.hyperparams)
        specs = wrapper_specs(hp.get("env_wrapper"))
        gain = None
        if any(path == CENTERING for path, _ in specs):
            gain = resolve_gain(args.centering_gain, args.env_id, args.env_kwargs, args.seed)
            specs = [(p, {**kw, "gain": gain}) if p == CENTERING else (p, kw) for p, kw in specs]
        normalize = literal(hp.get("normalize", False), "normalize")
        cfg = {
            "algo": args.algo,
            "env_id": args.env_id,
            "env_kwargs": args.env_kwargs,
            "wrappers": [{"class": p, "kwargs": kw} for p, kw in specs],
            "n_envs": int(args.num_envs if args.num_envs is not None else hp.get("n_envs", 1)),
            "vectorized": bool(args.vectorized),
            "vector_mode": resolve_mode(args.env_id, args.vector_mode) if args.vectorized else None,
            "n_timesteps": int(args.n_timesteps if args.n_timesteps is not None else float(hp["n_timesteps"])),
            "policy": hp.get("policy", "MlpPolicy"),
            "normalize": normalize if isinstance(normalize, dict) else bool(normalize),
            "policy_kwargs": literal(hp.get("policy_kwargs"), "policy_kwargs") or {},
            "algo_kwargs": {k: v for k, v in hp.items() if k not in ZOO_KEYS},
            "centering_gain": gain,
            "centering_mode": args.centering_gain,
            "smdp_gain": smdp_gain_if_exact(args.env_id, args.env_kwargs),
            "seed": args.seed,
            "threads": args.threads,
            "device": args.device,
            "args": asdict(args),
            "versions": _versions(),
        }
        run.mkdir(parents=True, exist_ok=True)
        (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))

    specs = [(w["class"], dict(w.get("kwargs") or {})) for w in cfg["wrappers"]]

    # 2. vectorized, wrapped, optionally normalized training envs
    def env_fn() -> Any:
        return make_env(cfg["env_id"], cfg["env_kwargs"], specs)

    if cfg.get("vectorized", False):
        venv = make_lane_vec_env(cfg["env_id"], cfg["n_envs"], cfg["env_kwargs"], seed=cfg["seed"],
                                 mode=cfg["vector_mode"], wrappers=specs, step_info_keys=STEP_INFO_KEYS)
    else:
        venv = make_vec_env(env_fn, n_envs=cfg["n_envs"], seed=cfg["seed"], vec_env_cls=DummyVecEnv)
    norm = cfg["normalize"]
    norm_kwargs = norm if isinstance(norm, dict) else {}
    gamma = float(cfg["algo_kwargs"].get("gamma", 0.99))

    # 3. the model: new, or the latest checkpoint
    cls = algo_class(cfg["algo"])
    done = 0
    ckpt = _latest_checkpoint(run) if args.resume else None
    if args.resume and ckpt is None and (run / "model.zip").exists():
        ckpt = (run / "model.zip", run / "vecnormalize.pkl" if (run / "vecnormalize.pkl").exists() else None, -1)
    if ckpt is not None:
        if norm:
            if ckpt[1] is None:
                raise FileNotFoundError(f"no normalization statistics next to checkpoint {ckpt[0]}")
            venv = VecNormalize.load(str(ckpt[1]), venv)
            venv.training = True
        model = cls.load(ckpt[0], env=venv, device=args.device, tensorboard_log=str(run / "tb"))
        done = int(model.num_timesteps)
    else:
        if args.resume:
            raise FileNotFoundError(f"run {str(run)!r} has no checkpoint to resume from")
        if norm:
            venv = VecNormalize(venv, gamma=gamma, **norm_kwargs)
        model = cls(
            cfg["policy"],
            venv,
            policy_kwargs=dict(cfg["policy_kwargs"]) or None,  # a copy: A2C adds its optimizer to it
            tensorboard_log=str(run / "tb"),
            seed=cfg["seed"],
            device=args.device,
            verbose=args.verbose,
            **dict(cfg["algo_kwargs"]),
        )

    # 4. callbacks: checkpoints, serving metrics, periodic evaluation
    callbacks = [
        CheckpointCallback(
            save_freq=max(args.checkpoint_freq // cfg["n_envs"], 1),
            save_path=str(run / "checkpoints"),
            name_prefix="model",
            save_vecnormalize=bool(norm),
        ),
        ServingMetricsCallback(
            smdp_gain=cfg["smdp_gain"],
            hparams={"algo": cfg["algo"], **cfg["algo_kwargs"], "n_envs": cfg["n_envs"], "seed": cfg["seed"],
                     "centering_gain": cfg["centering_gain"], "vectorized": bool(cfg.get("vectorized", False))},
        ),
    ]
    evaluator = None
    if args.eval_freq > 0:
        evaluator = PeriodicEvaluation(
            cfg["env_id"], cfg["env_kwargs"], specs, args.eval_freq, args.eval_episodes, args.eval_seed, run,
            smdp_gain=cfg["smdp_gain"],
        )
        callbacks.append(evaluator)

    # 5. train, then save everything the folder needs to reproduce and reload the run
    remaining = cfg["n_timesteps"] - done
    if remaining > 0:
        model.learn(
            total_timesteps=remaining,
            callback=CallbackList(callbacks),
            tb_log_name="run",
            log_interval=1,  # dump every rollout (A2C's default, 100, would hide short runs)
            reset_num_timesteps=not args.resume,
            progress_bar=args.progress,
        )
    model.save(run / "model.zip")
    if norm:
        model.get_vec_normalize_env().save(str(run / "vecnormalize.pkl"))
    (run / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    if evaluator is not None:
        final = evaluator.evaluate_now()
        (run / "final_evaluation.json").write_text(json.dumps(final, indent=1))
    venv.close()
    return run


def _versions() -> dict[str, str]:
    import gymnasium
    import numpy
    import stable_baselines3
    import torch

    import batch_env

    return {
        "python": platform.python_version(),
        "batch_env": batch_env.__version__,
        "stable_baselines3": str(stable_baselines3.__version__),
        "torch": str(torch.__version__),
        "gymnasium": gymnasium.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
    }
