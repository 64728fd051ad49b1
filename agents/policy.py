"""Load a training run as a policy that ``evaluate`` and ``compare`` use like a baseline.

A run directory (written by :mod:`agents.train`) holds ``config.yaml`` (everything needed
to rebuild the env and wrappers), ``model.zip``, ``vecnormalize.pkl`` (when the run
normalizes observations), ``checkpoints/`` and ``tb/`` (TensorBoard logs).

An rl-zoo3 run folder (``python -m rl_zoo3.train``: ``logs/<algo>/<env name>_<n>/``) loads
too: its model ``<env name>.zip`` (the env id with ``/`` replaced by ``-``), and in the
``<env name>/`` subfolder ``args.yml`` (algorithm, env id, env kwargs), ``config.yml``
(the hyperparameters: wrappers, normalization, env kwargs) and ``vecnormalize.pkl``.
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import yaml

from .common import ALGO_NAMES, AgentPolicy, algo_class, load_normalizer, model_file_info


def read_run_config(run_dir: str | Path) -> dict[str, Any]:
    """The configuration of a run: a ``batch-env train`` run's ``config.yaml``, or the one
    :func:`read_zoo_run` builds from an rl-zoo3 run folder; a clear error if the run is
    missing or broken. An rl-zoo3 run's also holds ``layout: rl-zoo3``, ``model_file``
    and ``normalizer_file`` (where its final model and statistics are)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"run directory {str(run)!r} not found")
    cfg_path = run / "config.yaml"
    if not cfg_path.exists():
        if _zoo_subfolders(run):
            return read_zoo_run(run)
        raise FileNotFoundError(
            f"run directory {str(run)!r} has no config.yaml: not a batch-env training run "
            "(nor an rl-zoo3 one: no <env name>/args.yml in it)"
        )
    try:
        cfg = yaml.safe_load(cfg_path.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{cfg_path} is corrupt: {' '.join(str(exc).split())}") from None
    for key in ("algo", "env_id", "env_kwargs", "wrappers"):
        if not isinstance(cfg, dict) or key not in cfg:
            raise ValueError(f"{cfg_path} is corrupt: missing field {key!r}")
    if cfg["algo"] not in ALGO_NAMES:
        raise ValueError(
            f"{cfg_path}: algo={cfg['algo']!r} is unknown: allowed values are {list(ALGO_NAMES)}"
        )
    if not isinstance(cfg["env_kwargs"], dict) or not isinstance(cfg["wrappers"], list):
        raise ValueError(f"{cfg_path} is corrupt: env_kwargs must be a mapping and wrappers a list")
    return cfg


class _ZooLoader(yaml.SafeLoader):
    """A safe YAML loader that also reads the ``OrderedDict`` rl-zoo3 dumps (as a dict)."""


def _ordered_dict(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
    pairs = loader.construct_sequence(node.value[0], deep=True) if node.value else []
    return {k: v for k, v in pairs}


_ZooLoader.add_constructor(
    "tag:yaml.org,2002:python/object/apply:collections.OrderedDict", _ordered_dict
)


def _zoo_subfolders(run: Path) -> list[Path]:
    """The ``<env name>/`` subfolders of an rl-zoo3 run folder (those holding ``args.yml``)."""
    return sorted(p.parent for p in run.glob("*/args.yml"))


def _read_zoo_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"rl-zoo3 run file {str(path)!r} not found")
    try:
        data = yaml.load(path.read_bytes().decode("utf-8"), Loader=_ZooLoader)  # noqa: S506 (a safe loader)
    except (yaml.YAMLError, UnicodeDecodeError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is corrupt: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is corrupt: expected a mapping, got {type(data).__name__}")
    return data


def read_zoo_run(run_dir: str | Path) -> dict[str, Any]:
    """A run configuration (the fields of ``config.yaml``: ``algo``, ``env_id``,
    ``env_kwargs``, ``wrappers``, ``normalize``, plus ``model_file`` and
    ``normalizer_file``) from an rl-zoo3 run folder: the algorithm, env id and env kwargs
    from ``<env name>/args.yml`` (its ``env_kwargs`` over the hyperparameters'
    ``env_kwargs``, as ``rl_zoo3.enjoy`` does; ``render_mode`` left out), the wrappers and
    normalization from ``<env name>/config.yml``.

    :raises FileNotFoundError: when a file is missing; ``ValueError`` naming the file and
        field when one is damaged or names what batch-env cannot load.
    """
    from .common import literal, wrapper_specs

    run = Path(run_dir)
    subs = _zoo_subfolders(run)
    if len(subs) != 1:
        raise ValueError(
            f"run directory {str(run)!r} is not one rl-zoo3 run: it has {len(subs)} <env name>/args.yml "
            "subfolders, expected 1"
        )
    sub = subs[0]
    args = _read_zoo_yaml(sub / "args.yml")
    hp = _read_zoo_yaml(sub / "config.yml")
    where = str(sub / "args.yml")
    algo = args.get("algo")
    if algo not in ALGO_NAMES:
        raise ValueError(
            f"{where}: algo={algo!r} cannot be loaded by batch-env: allowed values are {list(ALGO_NAMES)}"
        )
    env_id = str(args.get("env") or "")
    if not env_id:
        raise ValueError(f"{where} is corrupt: missing field 'env'")
    env_kwargs = dict(literal(hp.get("env_kwargs"), f"{sub / 'config.yml'}: env_kwargs") or {})
    if args.get("env_kwargs") is not None:
        if not isinstance(args["env_kwargs"], dict):
            raise ValueError(
                f"{where}: env_kwargs={args['env_kwargs']!r} is invalid: expected a mapping"
            )
        env_kwargs.update(args["env_kwargs"])
    env_kwargs.pop("render_mode", None)
    try:
        specs = wrapper_specs(hp.get("env_wrapper"))
    except ValueError as exc:
        raise ValueError(f"{sub / 'config.yml'}: {exc}") from None
    normalize = literal(hp.get("normalize", False), f"{sub / 'config.yml'}: normalize")
    model = run / f"{sub.name}.zip"
    return {
        "algo": algo,
        "env_id": env_id,
        "env_kwargs": env_kwargs,
        "wrappers": [{"class": p, "kwargs": kw} for p, kw in specs],
        "normalize": bool(normalize),
        "layout": "rl-zoo3",
        "model_file": str(model),
        "normalizer_file": str(sub / "vecnormalize.pkl"),
    }


def sampling_algo(algo: str) -> bool:
    """Whether ``algo``'s policy is a distribution to act by drawing from (all but DQN)."""
    return algo != "dqn"


def run_acting_mode(run_dir: str | Path) -> str:
    """How a finished run acts: ``final_evaluation.json``'s ``acting`` (the mode, most
    likely action or a draw from the policy, that scored better on the run's own
    evaluation episodes: :func:`agents.callbacks.acting_mode`), derived from its two
    modes' figures for a run written before the key existed; ``deterministic`` for a run
    without a final evaluation (trained with ``--eval-freq 0``, or rl-zoo3's) and for
    DQN (whose sampled mode is epsilon-greedy exploration, not a policy)."""
    from .callbacks import ACTING_MODES, acting_mode

    path = Path(run_dir) / "final_evaluation.json"
    if not path.is_file():
        return "deterministic"
    if (Path(run_dir) / "config.yaml").is_file() and not sampling_algo(
        read_run_config(Path(run_dir))["algo"]
    ):
        return "deterministic"
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{str(path)!r} is unreadable or not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError(f"{str(path)!r} holds {type(record).__name__}, expected a JSON object")
    mode = record.get("acting")
    if mode is None:
        return acting_mode(record)
    if mode not in ACTING_MODES:
        raise ValueError(
            f"{str(path)!r}: acting={mode!r} is invalid: expected one of {ACTING_MODES}"
        )
    return str(mode)


def load_policy(
    run_dir: str | Path,
    deterministic: bool | None = None,
    model_file: str | Path | None = None,
    device: str = "cpu",
    name: str | None = None,
) -> AgentPolicy:
    """A trained agent as a ``reset()`` / ``act(obs, info)`` policy for the raw env.

    :param run_dir: the training run's directory (``batch-env train``'s or rl-zoo3's).
    :param deterministic: the policy's most likely actions (True) or draws from it
        (False, seeded by each episode's seed); default: the run's own acting mode
        (:func:`run_acting_mode`), the one its final evaluation scored better
        (deterministic for a ``model_file``).
    :param model_file: a checkpoint to load instead of ``model.zip``, with the
        observation statistics saved beside it (``<prefix>_vecnormalize_<N>_steps.pkl``
        next to ``<prefix>_<N>_steps.zip``, as ``batch-env train`` and rl-zoo3 save them)
        where they exist, else the run's final ones.
    :param device: torch device for inference.
    :param name: label (default: ``<algo>:<run_dir>``).
    """
    run = Path(run_dir)
    cfg = read_run_config(run)
    path = (
        Path(model_file)
        if model_file is not None
        else Path(cfg.get("model_file", run / "model.zip"))
    )
    if not path.exists():
        raise FileNotFoundError(
            f"model file {str(path)!r} not found (is the run finished? try --resume)"
        )
    try:
        algo, _ = model_file_info(path)
    except ValueError as exc:
        raise ValueError(f"model file {str(path)!r} is corrupt: {exc}") from None
    if algo is not None and algo != cfg["algo"]:
        if cfg.get("layout") == "rl-zoo3":
            raise ValueError(
                f"{str(path)!r} holds a {algo} model but the rl-zoo3 run says algo={cfg['algo']!r}"
            )
        raise ValueError(
            f"{run / 'config.yaml'} says algo={cfg['algo']!r} but {str(path)!r} holds a {algo} model: "
            f"was config.yaml edited? restore algo: {algo}"
        )
    try:
        model = algo_class(cfg["algo"]).load(path, device=device)
    except (zipfile.BadZipFile, ValueError, KeyError, EOFError, RuntimeError, OSError) as exc:
        raise ValueError(
            f"model file {str(path)!r} is corrupt or not a {cfg['algo']} model: {exc}"
        ) from None
    norm = None
    norm_path = _checkpoint_normalizer(model_file) or Path(
        cfg.get("normalizer_file", run / "vecnormalize.pkl")
    )
    if cfg.get("normalize"):
        if not norm_path.exists():
            raise FileNotFoundError(
                f"{str(norm_path)!r} not found: the run normalizes observations"
            )
        norm = load_normalizer(norm_path)
    specs = [(w["class"], dict(w.get("kwargs") or {})) for w in cfg["wrappers"]]
    if deterministic is None:
        # the final evaluation saw the run's model, not an earlier checkpoint's
        deterministic = model_file is not None or run_acting_mode(run) == "deterministic"
    return AgentPolicy(
        model,
        cfg["env_id"],
        cfg["env_kwargs"],
        specs,
        obs_normalizer=norm,
        deterministic=deterministic,
        name=name or f"{cfg['algo']}:{run}",
    )


def _checkpoint_normalizer(model_file: str | Path | None) -> Path | None:
    """The observation statistics saved with a checkpoint (``<prefix>_<N>_steps.zip``:
    ``<prefix>_vecnormalize_<N>_steps.pkl`` in the same folder), where the file exists."""
    if model_file is None:
        return None
    path = Path(model_file)
    m = re.fullmatch(r"(.+)_(\d+)_steps\.zip", path.name)
    if m is None:
        return None
    twin = path.with_name(f"{m.group(1)}_vecnormalize_{m.group(2)}_steps.pkl")
    return twin if twin.exists() else None


def parse_policy_spec(spec: str) -> tuple[str, str]:
    """Split ``"ppo:runs/my-run"`` into ``("ppo", "runs/my-run")``."""
    algo, sep, path = spec.partition(":")
    if not sep or not path:
        raise ValueError(
            f"policy={spec!r} is not an agent spec: expected '<algo>:<run_dir>', e.g. 'ppo:runs/ppo-s0'"
        )
    return algo, path
