"""``batch-env record``: a video of a run or a baseline (RecordVideo, the video extra), or
its frames as PNG files when moviepy is missing or the output is a folder."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from experiments.cli import main
from experiments.record import record

PNG = b"\x89PNG\r\n\x1a\n"


def test_frames_of_a_baseline_one_png_per_step(tmp_path):
    res = record("greedy", tmp_path / "frames", episodes=2, max_frames=4, seed=3)
    assert not res["video"] and "no video suffix" in res["why_frames"]
    assert res["env_id"] == "batch_env/DynamicBatching-v0"
    per = {k: sorted((tmp_path / "frames" / f"episode-{k}").glob("*.png")) for k in (0, 1)}
    assert [len(v) for v in per.values()] == [5, 5] == [res["frames"] // 2] * 2  # reset + 4 steps
    assert all(p.read_bytes().startswith(PNG) for v in per.values() for p in v)
    assert res["frames"] == len(res["files"]) == 10


def test_without_moviepy_the_frames_are_written_and_it_says_why(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "moviepy" else real(name, *a)
    )
    res = record("greedy", tmp_path / "video.mp4", max_frames=2)
    assert not res["video"] and "moviepy is not installed" in res["why_frames"]
    assert len(list((tmp_path / "video" / "episode-0").glob("frame-*.png"))) == 3


@pytest.mark.slow
def test_a_trained_run_on_its_own_env_as_a_video(tmp_path, capsys):
    pytest.importorskip("moviepy")  # the video extra (in dev)
    from agents.train import TrainArgs, train

    run = train(
        TrainArgs(
            env_id="batch_env/NodeBatching-v0",
            env_kwargs={"horizon_requests": 30},
            n_timesteps=64,
            num_envs=1,
            eval_freq=0,
            run_dir=str(tmp_path / "run"),
            progress=False,
        )
    )
    out = tmp_path / "v.mp4"
    assert main(["record", str(run), "--out", str(out), "--max-frames", "30"]) == 0
    assert "wrote" in capsys.readouterr().out and out.stat().st_size > 1000
    res = record(f"ppo:{run}", tmp_path / "two.mp4", episodes=2, max_frames=5)
    assert (
        res["env_id"] == "batch_env/NodeBatching-v0" and res["env_kwargs"]["horizon_requests"] == 30
    )
    assert [p.split("/")[-1] for p in res["files"]] == ["two-episode-0.mp4", "two-episode-1.mp4"]


def test_an_env_without_frames_or_a_bad_count_is_refused_and_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="episodes=0"):
        record("greedy", tmp_path / "x", episodes=0)
    with pytest.raises(ValueError, match="neither a run folder"):
        record("nope", tmp_path / "x")
    assert list(tmp_path.iterdir()) == []
    frame = np.zeros((2, 2, 3), dtype=np.uint8)
    from batch_env.render import write_png

    write_png(tmp_path / "f.png", frame)
    assert (tmp_path / "f.png").read_bytes().startswith(PNG)
    with pytest.raises(ValueError, match="expected H x W x 3 uint8"):
        write_png(tmp_path / "g.png", frame[..., 0])
