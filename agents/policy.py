"""Load a training run as a policy that ``evaluate`` and ``compare`` use like a baseline.

A run directory (written by :mod:`agents.train`) holds ``config.yaml`` (everything needed
to rebuild the env and wrappers), ``model.zip``, ``vecnormalize.pkl`` (when the run
normalizes observations), ``checkpoints/`` and ``tb/`` (TensorBoard logs).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import yaml

from .common import ALGO_NAMES, AgentPolicy, algo_class, load_normalizer, model_file_info


def read_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The ``config.yaml`` of a run, with a clear error if the run is missing or broken."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory {str(run)!r} not found")
    cfg_path = run / "config.yaml"
    if not cfg_path.exists():
        raise FileNotFoundError(f"run directory {str(run)!r} has no config.yaml: not a batch-env training run")
    try:
        cfg = yaml.safe_load(cfg_path.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{cfg_path} is corrupt: {' '.join(str(exc).split())}") from None
    for key in ("algo", "env_id", "env_kwargs", "wrappers"):
        if not isinstance(cfg, dict) or key not in cfg:
            raise ValueError(f"{cfg_path} is corrupt: missing field {key!r}")
    if cfg["algo"] not in ALGO_NAMES:
        raise ValueError(f"{cfg_path}: algo={cfg['algo']!r} is unknown: allowed values are {list(ALGO_NAMES)}")
    if not isinstance(cfg["env_kwargs"], dict) or not isinstance(cfg["wrappers"], list):
        raise ValueError(f"{cfg_path} is corrupt: env_kwargs must be a mapping and wrappers a list")
    return cfg


def load_policy(
    run_dir: str | Path,
    deterministic: bool = True,
    model_file: str | Path | None = None,
    device: str = "cpu",
    name: str | None = None,
) -> AgentPolicy:
    """A trained agent as a ``reset()`` / ``act(obs, info)`` policy for the raw env.

    :param run_dir: the training run's directory.
    :param deterministic: greedy actions (default) or sampled ones.
    :param model_file: a checkpoint to load instead of ``model.zip``.
    :param device: torch device for inference.
    :param name: label (default: ``<algo>:<run_dir>``).
    """
    run = Path(run_dir)
    cfg = read_run_config(run)
    path = Path(model_file) if model_file is not None else run / "model.zip"
    if not path.exists():
        raise FileNotFoundError(f"model file {str(path)!r} not found (is the run finished? try --resume)")
    try:
        algo, _ = model_file_info(path)
    except ValueError as exc:
        raise ValueError(f"model file {str(path)!r} is corrupt: {exc}") from None
    if algo is not None and algo != cfg["algo"]:
        raise ValueError(f"{run / 'config.yaml'} says algo={cfg['algo']!r} but {str(path)!r} holds a {algo} model: "
                         f"was config.yaml edited? restore algo: {algo}")
    try:
        model = algo_class(cfg["algo"]).load(path, device=device)
    except (zipfile.BadZipFile, ValueError, KeyError, EOFError, RuntimeError, OSError) as exc:
        raise ValueError(f"model file {str(path)!r} is corrupt or not a {cfg['algo']} model: {exc}") from None
    norm = None
    norm_path = run / "vecnormalize.pkl"
    if cfg.get("normalize"):
        if not norm_path.exists():
            raise FileNotFoundError(f"{str(norm_path)!r} not found: the run normalizes observations")
        norm = load_normalizer(norm_path)
    specs = [(w["class"], dict(w.get("kwargs") or {})) for w in cfg["wrappers"]]
    return AgentPolicy(
        model,
        cfg["env_id"],
        cfg["env_kwargs"],
        specs,
        obs_normalizer=norm,
        deterministic=deterministic,
        name=name or f"{cfg['algo']}:{run}",
    )


def parse_policy_spec(spec: str) -> tuple[str, str]:
    """Split ``"ppo:runs/my-run"`` into ``("ppo", "runs/my-run")``."""
    algo, sep, path = spec.partition(":")
    if not sep or not path:
        raise ValueError(f"policy={spec!r} is not an agent spec: expected '<algo>:<run_dir>', e.g. 'ppo:runs/ppo-s0'")
    return algo, path
