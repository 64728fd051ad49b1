"""The shipped hyperparameter files (``<algo>.yml``, rl-zoo3 format) as package data, and
as Python modules that rl-zoo3's ``--conf-file`` accepts from any install::

    python -m rl_zoo3.train --algo ppo --gym-packages batch_env \\
        --env batch_env/DynamicBatching-v0 --conf-file agents.hyperparams.ppo

(``agents.hyperparams.<algo>.hyperparams`` is the file's mapping of env id -> entry.)
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml


def path(algo: str) -> Path:
    """The shipped ``<algo>.yml`` (a file of the installed package).

    :raises FileNotFoundError: naming the file when ``algo`` has none.
    """
    file = Path(str(resources.files(__name__) / f"{algo}.yml"))
    if not file.is_file():
        shipped = sorted(p.stem for p in file.parent.glob("*.yml"))
        raise FileNotFoundError(
            f"hyperparameter file {str(file)!r} not found: shipped are {shipped}"
        )
    return file


#: algorithms whose shipped hyperparameters are another's, changed by :func:`derive`
DERIVED_ALGOS = {"ppo_input": "ppo", "ppo_crn": "ppo"}


def read(algo: str) -> dict[str, Any]:
    """The mapping of env id -> hyperparameters in the shipped ``<algo>.yml``; for an
    algorithm derived from another (:data:`DERIVED_ALGOS`: ``ppo_input`` from ``ppo``),
    the other's entries changed by :func:`derive`."""
    base = DERIVED_ALGOS.get(algo, algo)
    data = yaml.safe_load(path(base).read_text(encoding="utf-8"))
    if base == algo:
        return data
    return {env_id: derive(algo, entry) for env_id, entry in data.items()}


def derive(algo: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A derived algorithm's entry from its base's entry for the same env (``ppo_input``:
    :func:`agents.input_critic.input_entry`)."""
    if algo == "ppo_crn":
        from ..crn import crn_entry

        return crn_entry(entry)
    if algo != "ppo_input":
        raise ValueError(f"algo={algo!r} is not derived from another's hyperparameters")
    from ..input_critic import input_entry

    return input_entry(entry)
