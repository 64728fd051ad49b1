"""The harness's one store: keyed records, atomic, one damage policy in both layouts."""

from __future__ import annotations

import json

from experiments.harness.store import Store, digest


def test_a_damaged_file_is_named_moved_aside_and_recomputed(tmp_path, capsys):
    store = Store(tmp_path / "cells", then="recomputing the cell")
    assert store.cached("a", lambda: {"x": 1}) == {"x": 1}
    assert store.cached("a", lambda: {"x": 2}) == {"x": 1}  # kept: not recomputed
    store.path("a").write_text('{"x": ')  # cut by a kill
    assert store.cached("a", lambda: {"x": 3}) == {"x": 3}
    err = capsys.readouterr().err
    assert f"warning: {store.path('a')} is damaged" in err and "recomputing the cell" in err
    assert (tmp_path / "cells" / "a.json.corrupt").read_text() == '{"x": '

    def whole(rec):
        if "x" not in rec:
            raise ValueError("no x")

    store.path("a").write_text("{}")  # JSON, but not a whole record
    assert store.get("a", whole) is None
    assert "no x" in capsys.readouterr().err
    assert (tmp_path / "cells" / "a.json.corrupt-2").exists()


def test_a_record_of_another_key_is_stale_not_damaged(tmp_path, capsys):
    store = Store(tmp_path)
    assert store.cached_for("check", digest("model 1"), lambda: 1) == 1
    assert store.cached_for("check", digest("model 1"), lambda: 2) == 1
    assert store.cached_for("check", digest("model 2"), lambda: 3) == 3
    assert capsys.readouterr().err == ""
    assert json.loads(store.path("check").read_text()) == {"key": digest("model 2"), "result": 3}


def test_a_log_names_and_sets_aside_a_damaged_line_once(tmp_path, capsys):
    log = tmp_path / "greedy.jsonl"
    Store(log, log=True).put("s1", {"rate": 1.0})
    with log.open("a") as f:
        f.write('{"key": "s2", "ra')  # a killed run's torn last line
    store = Store(log, log=True, then="rerunning the episode")
    assert store.get("s1") == {"rate": 1.0} and store.get("s2") is None
    assert "line 2 is damaged" in capsys.readouterr().err
    store.put("s2", {"rate": 2.0})
    lines = log.read_text().splitlines()
    assert len(lines) == 3 and lines[1] == '{"key": "s2", "ra'  # append-only: left in place
    again = Store(log, log=True)
    assert again.get("s1") == {"rate": 1.0} and again.get("s2") == {"rate": 2.0}
    assert capsys.readouterr().err == ""  # set aside before: not named again
    assert (tmp_path / "greedy.jsonl.corrupt").read_text() == '{"key": "s2", "ra\n'
    again.clear()
    assert not log.exists() and Store(log, log=True).get("s1") is None
