"""Config reading and validation shared by every experiment.

An experiment's config is a YAML mapping, given as a path or as the name of a shipped
file in ``experiments/configs`` (:func:`read_yaml_config`); each experiment checks its
own keys with :func:`check_mapping` and its output folder's name with
:func:`check_name`. Options that hold YAML (``--env-kwargs``) and files that hold one
mapping (``--env-config``) are read by :func:`parse_mapping` and
:func:`load_yaml_mapping`. Every error is a ``ValueError`` (``FileNotFoundError`` for a
missing file) that names the field, the value and what is allowed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import yaml

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


def one_line(text: Any) -> str:
    """``text`` on one line (YAML and library messages span several)."""
    return " ".join(str(text).split())


def read_yaml_config(path_or_name: str | os.PathLike[str]) -> dict[str, Any]:
    """A YAML mapping from a path or a name in ``experiments/configs`` (``.yaml`` or ``.yml``).

    :raises FileNotFoundError: listing the shipped configs when neither exists.
    :raises ValueError: for invalid YAML or a top level that is not a mapping.
    """
    path = Path(path_or_name)
    if not path.is_file():
        path = next(
            (
                p
                for p in (CONFIG_DIR / f"{path_or_name}{ext}" for ext in (".yaml", ".yml"))
                if p.exists()
            ),
            path,
        )
    if not path.is_file():
        shipped = sorted(p.stem for p in (*CONFIG_DIR.glob("*.yaml"), *CONFIG_DIR.glob("*.yml")))
        raise FileNotFoundError(
            f"config {str(path_or_name)!r} not found: give a YAML path or one of {shipped}"
        )
    try:
        cfg = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"config {path}: invalid YAML: {one_line(exc)}") from None
    if not isinstance(cfg, dict):
        raise ValueError(
            f"config {path}: expected a mapping at the top level, got {type(cfg).__name__}"
        )
    cfg["_path"] = str(path)
    return cfg


def check_mapping(
    cfg: Any, where: str, allowed: set[str], required: tuple[str, ...]
) -> dict[str, Any]:
    """A copy of a config's top-level mapping, checked: a mapping, no unknown keys (keys
    starting with ``_`` are free), every required key present; else ``ValueError``
    naming ``where``, the key and what is allowed."""
    if not isinstance(cfg, dict):
        raise ValueError(f"{where}: expected a mapping at the top level, got {type(cfg).__name__}")
    cfg = dict(cfg)
    unknown = sorted(k for k in set(cfg) - allowed if not str(k).startswith("_"))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed keys are {sorted(allowed)}")
    for key in required:
        if key not in cfg:
            raise ValueError(f"{where}: missing required key {key!r}")
    return cfg


def is_number(x: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_name(name: Any, where: str) -> None:
    """Refuse a config ``name`` that is not a plain folder name (outputs go to ``<dir>/<name>/``)."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(
            f"{where}: name={name!r} must be a non-empty folder name (no '/', not starting with '.')"
        )


def parse_mapping(text: str | None, field: str) -> dict[str, Any] | None:
    """The YAML/JSON mapping an option gives (None when the option is not given).

    :raises ValueError: naming the option and its value when the text is not YAML or not a mapping.
    """
    if text is None:
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{field}={text!r} is not valid YAML/JSON: {one_line(exc)}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{field}={text!r} must be a mapping, e.g. '{{key: value, other: 2}}'")
    return value


def load_yaml_mapping(path: str, field: str) -> dict[str, Any]:
    """The mapping in the YAML file an option names; ``ValueError`` (``FileNotFoundError``)
    naming the option and the file when it is missing, unreadable, not YAML or not a mapping."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"{field}={path!r}: file not found" + (" (it is a folder)" if p.is_dir() else "")
        )
    try:
        value = yaml.safe_load(p.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{field}={path!r} is not valid YAML: {one_line(exc)}") from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{field}={path!r} must hold a mapping of env kwargs, got {type(value).__name__}"
        )
    return value
