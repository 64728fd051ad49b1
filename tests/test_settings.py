"""Each training setting has one definition (issue 65, item 5): ``agents/settings.py``'s
:data:`SETTINGS` holds its default, type and help; ``agents.train``'s tables, the
``TrainArgs`` fields, ``batch-env train``'s options and help, the sweep's refusals and a
run's record are made from it. The test finds every other place a default could be
written (a default table, a ``TrainArgs`` field, a CLI option's default or help, a
``.get(<setting>, <literal>)`` fallback) and holds that there is none."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from agents import settings as S
from agents import train
from experiments import cli
from experiments import train as train_cli

ROOT = Path(__file__).resolve().parents[1]
NAMES = {x.name for x in S.SETTINGS}


def _train_options() -> dict[str, object]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    p = sub.choices["train"]
    return {o: a for a in p._actions for o in a.option_strings}


def test_the_tables_are_made_from_the_settings():
    assert train.RUN_SETTINGS == tuple(x.name for x in S.SETTINGS)
    assert train.DEFAULTS == {x.name: x.default for x in S.SETTINGS}
    assert train.RESUME_OVERRIDES == ("n_timesteps",)
    assert train._COUNTS == {x.name: x.low for x in S.SETTINGS if x.low is not None}
    fields = {f.name: f for f in dataclasses.fields(train.TrainArgs)}
    for name in NAMES:  # a setting's field says "not given"; its default is the setting's
        assert fields[name].default is None, name
    assert set(fields) - NAMES == {
        "run_dir",
        "resume",
        "overwrite",
        "progress",
        "announce",
        "verbose",
    }
    for x in S.SETTINGS:
        assert x.help and f"``{x.name}`` [{x.shown_default()}]" in (train.TrainArgs.__doc__ or "")


def test_every_setting_is_an_option_whose_help_shows_its_one_default():
    opts = _train_options()
    for x in S.SETTINGS:
        a = opts[x.option]
        assert a.dest == x.name and a.default in (None, False), x.option
        assert f"(default {x.shown_default()}; --resume keeps" in a.help, (x.option, a.help)
        if x.low is not None:
            assert a.type(str(x.low)) == x.low
    rows = {opt: dest for opt, dest, _why in train_cli._SET_BY_SWEEP}
    assert all(rows[x.option] == x.name for x in S.SETTINGS)


def _defaults_written_elsewhere(path: Path) -> list[str]:
    """Where ``path`` writes a setting's default again: a dict literal mapping three or
    more settings to their defaults (a table), or ``.get("<setting>", <its default>)``. (A
    different value is that caller's own choice, e.g. an experiment's algorithm; the
    ``batch-env train`` options are held by the test above.)"""
    tree = ast.parse(path.read_text())
    found = []

    def is_default(name: object, v: ast.expr) -> bool:
        return (
            isinstance(name, str)
            and name in S.BY_NAME
            and isinstance(v, ast.Constant)
            and v.value is not None
            and v.value == S.BY_NAME[name].default
            and type(v.value) is type(S.BY_NAME[name].default)
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = [
                k.value
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and is_default(k.value, v)
            ]
            if len(keys) >= 3:
                found.append(f"{path.name}:{node.lineno} a table of {keys}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and is_default(node.args[0].value, node.args[1])
        ):
            found.append(f"{path.name}:{node.lineno} .get({node.args[0].value!r}, <its default>)")
    return found


def test_no_default_is_written_twice():
    files = [
        p
        for pkg in ("agents", "experiments")
        for p in sorted((ROOT / pkg).rglob("*.py"))
        if p.name != "settings.py"
    ]
    found = [w for p in files for w in _defaults_written_elsewhere(p)]
    assert not found, found
    # and the finder finds what it looks for
    probe = ROOT / "tests" / "_settings_probe.py"
    probe.write_text(
        'T = {"eval_freq": 50000, "seed": 0, "threads": 1}\nx = {}.get("threads", 1)\n'
        'y = {}.get("algo", "ppo_mask")\nz = {"eval_freq": 10, "seed": 1}\n'
    )
    try:
        assert len(_defaults_written_elsewhere(probe)) == 2
    finally:
        probe.unlink()


def test_help_texts_name_no_other_default():
    for x in S.SETTINGS:
        assert not re.search(r"\(default ", x.help), x.name  # the default is added once
