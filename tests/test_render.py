"""Render modes (issue 18): ``rgb_array`` frames, ``human`` (text without a display), the
shared drawing helper of :mod:`batch_env.render`, RecordVideo and SB3's env-from-id path."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env

import batch_env
from batch_env import render as R
from batch_env.envs import (
    DynamicBatchingEnv,
    LLMBatchingEnv,
    LLMBatchingV1Env,
    LLMBatchingV2Env,
    LLMRoutingEnv,
    NodeBatchingEnv,
)

ENVS = {
    "batch_env/DynamicBatching-v0": DynamicBatchingEnv,
    "batch_env/NodeBatching-v0": NodeBatchingEnv,
    "batch_env/LLMBatching-v0": LLMBatchingEnv,
    "batch_env/LLMBatching-v1": LLMBatchingV1Env,
    "batch_env/LLMBatching-v2": LLMBatchingV2Env,
    "batch_env/LLMRouting-v0": LLMRoutingEnv,
}
SMALL = {
    "batch_env/DynamicBatching-v0": {"horizon_requests": 40},
    "batch_env/NodeBatching-v0": {"horizon_requests": 40},
    "batch_env/LLMBatching-v0": {
        "horizon_requests": 8,
        "lengths": {"kind": "fixed", "prompt_tokens": 20, "output_tokens": 4},
    },
    "batch_env/LLMBatching-v1": {
        "horizon_requests": 8,
        "lengths": {"kind": "fixed", "prompt_tokens": 20, "output_tokens": 4},
    },
    "batch_env/LLMBatching-v2": {  # v2 asks only where the caps differ: a queue
        "horizon_requests": 40,
        "lengths": {"kind": "fixed", "prompt_tokens": 20, "output_tokens": 4},
        "workload": {"kind": "poisson", "rate_per_s": 40.0},
    },
    "batch_env/LLMRouting-v0": {
        "horizon_requests": 40,
        "lengths": {"kind": "fixed", "prompt_tokens": 20, "output_tokens": 4},
        "workload": {"kind": "poisson", "rate_per_s": 40.0},
    },
}
SHAPE = (R.HEIGHT, R.WIDTH, 3)
RED = np.array(R.RED, dtype=np.uint8)
PANEL = np.array(R.PANEL, dtype=np.uint8)
NO_DISPLAY = "ignore:render_mode='human': no display"


def _random_valid(env, rng) -> int:
    return int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))


def _queue_bars(frame: np.ndarray) -> np.ndarray:
    """Colour of each queue bar's bottom pixel (row just above the baseline)."""
    x0, _, _, y1 = R.QUEUE_BOX
    xs = x0 + 2 + np.arange(R.QUEUE_BARS) * (R.BAR_W + R.BAR_GAP)
    return frame[y1 - 3, xs]


def _drawn(colors: np.ndarray) -> np.ndarray:
    return np.any(colors != PANEL, axis=-1)


def _is_red(colors: np.ndarray) -> np.ndarray:
    return np.all(colors == RED, axis=-1)


# -- frames: shape, dtype, every step ------------------------------------------------------
@pytest.mark.parametrize("env_id", list(ENVS))
def test_frames_over_an_episode(env_id):
    env = gym.make(env_id, render_mode="rgb_array", **SMALL[env_id])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    previous = env.render()
    frames = 1
    for _ in range(400):
        _, _, _, truncated, _ = env.step(_random_valid(env, rng))
        frame = env.render()
        assert frame.shape == SHAPE and frame.dtype == np.uint8
        assert frame is not previous and not np.shares_memory(frame, previous)  # a new array
        previous = frame
        frames += 1
        if truncated:
            break
    else:
        pytest.fail("the episode did not end")
    env.close()
    assert frames > 5


@pytest.mark.parametrize("env_id", list(ENVS))
def test_frame_changes_with_state_and_is_a_pure_read(env_id):
    env = ENVS[env_id](render_mode="rgb_array", **SMALL[env_id])
    env.reset(seed=3)
    a = env.render()
    assert np.array_equal(a, env.render())  # rendering twice changes nothing
    obs_before = env._obs()
    env.render()
    assert np.array_equal(obs_before, env._obs())
    rng = np.random.default_rng(1)
    for _ in range(5):
        env.step(_random_valid(env, rng))
    assert not np.array_equal(a, env.render())


def test_queue_bars_count_and_red_past_the_sla():
    # overload: always wait, so the queue grows and its oldest requests pass the SLA
    env = DynamicBatchingEnv(
        render_mode="rgb_array", workload={"kind": "poisson", "load": 0.9}, queue_capacity=30
    )
    env.reset(seed=0)
    seen_red = seen_mixed = False
    for _ in range(150):
        env.step(0)
        frame = env.render()
        arr, ns = env.arrivals, env.started
        q = len(arr) - ns
        bars = _queue_bars(frame)
        assert _drawn(bars).sum() == min(q, R.QUEUE_BARS)
        waits = env.now - np.array(arr[ns : ns + R.QUEUE_BARS])
        past = waits > env._sla
        assert np.array_equal(_is_red(bars)[: len(past)], past)
        seen_red |= bool(past.any())
        seen_mixed |= bool(past.any() and not past.all())
    assert seen_red and seen_mixed
    # a full queue: the gauge under it is red to the end
    assert env.queue_len == 30 and env.drops > 0
    x0, _, x1, y1 = R.QUEUE_BOX
    assert np.all(frame[y1 + 5, x0:x1] == RED)


def test_long_queue_counts_the_bars_not_drawn():
    env = DynamicBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "load": 0.9})
    env.reset(seed=0)
    for _ in range(200):
        env.step(0)
    q = env.queue_len
    assert q > R.QUEUE_BARS
    frame = env.render()
    assert _drawn(_queue_bars(frame)).all()
    # the "+N" label is drawn under the right end of the gauge
    x0, _, x1, y1 = R.QUEUE_BOX
    label = frame[y1 + 10 : y1 + 15, x1 - 40 : x1]
    assert np.any(np.all(label == np.array(R.TEXT, dtype=np.uint8), axis=-1))


def test_empty_queue_frames():
    # NodeBatching: groups in flight while nobody waits
    env = NodeBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "load": 0.3})
    env.reset(seed=0)
    B = env._B
    seen = False
    for _ in range(300):
        env.step(B)  # admit everything, run the least-advanced group
        if env.queue_len == 0 and env._groups:
            frame = env.render()
            assert not _drawn(_queue_bars(frame)).any()
            # the groups are drawn in the service panel
            x0, y0, x1, y1 = R.SERVICE_BOX
            assert np.any(np.all(frame[y0 + 10 : y1 - 14, x0 + 6 : x1 - 6] != PANEL, axis=-1))
            seen = True
    assert seen
    # LLMBatching: running requests, empty queue
    env = LLMBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "rate_per_s": 1.0})
    env.reset(seed=0)
    for _ in range(50):
        env.step(len(env.grid) - 1)
        if not env.server.state.waiting and env.server.state.running:
            frame = env.render()
            assert not _drawn(_queue_bars(frame)).any()
            break
    else:
        pytest.fail("no state with running requests and an empty queue")


def test_last_batch_panel_and_timeline_follow_the_batches():
    env = DynamicBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "load": 0.7})
    env.reset(seed=0)
    B = env._B
    sizes = []
    rng = np.random.default_rng(0)
    for _ in range(300):
        _, _, _, _, info = env.step(int(rng.integers(0, 6)))
        if info["last_batch_size"]:
            sizes.append(info["last_batch_size"])
        if len(sizes) == 150:  # more than the timeline holds, so the ring wraps
            break
    env.render()
    got, lat, kinds = env._view.timeline.arrays()
    assert len(got) == R.TIMELINE_BARS
    assert np.allclose(got * B, sizes[-R.TIMELINE_BARS :])
    assert np.all(lat > 0) and not kinds.any()
    # rendering only every so often reads the same record
    env2 = DynamicBatchingEnv(render_mode="rgb_array", workload={"kind": "poisson", "load": 0.7})
    env2.reset(seed=0)
    env2.render()
    rng = np.random.default_rng(0)
    for _ in range(300):
        _, _, _, _, info = env2.step(int(rng.integers(0, 6)))
        if env2.batches == 150:
            break
    env2.render()
    assert np.allclose(env2._view.timeline.arrays()[0] * B, sizes[-R.TIMELINE_BARS :])
    # a new episode starts the timeline afresh
    env2.reset(seed=1)
    env2.render()
    assert len(env2._view.timeline) == 0


def test_llm_kv_nearly_full_and_preemptions():
    env = LLMBatchingEnv(
        render_mode="rgb_array",
        gpu_memory_utilization=0.2,
        max_model_len=512,
        lengths={"kind": "fixed", "prompt_tokens": 200, "output_tokens": 150},
        workload={"kind": "poisson", "rate_per_s": 20},
        horizon_requests=200,
    )
    env.reset(seed=0)
    x0, _, x1, y1 = R.SERVICE_BOX
    kv_row = y1 - 10
    seen_full = seen_preempted = False
    for _ in range(1500):
        env.step(len(env.grid) - 1)
        frame = env.render()
        assert frame.shape == SHAPE
        used, total = env.server.state.kv_used, env.server.state.kv_total
        filled = np.any(
            frame[kv_row, x0 + 2 : x1 - 2] != np.array(R.GRID, dtype=np.uint8), axis=-1
        ).sum()
        assert abs(filled / (x1 - x0 - 4) - used / total) < 0.02
        if total - used <= env.server.state.kv_watermark:
            assert np.all(frame[kv_row, x0 + 2] == RED)
            seen_full = True
        waiting = list(env.server.state.waiting)[: R.QUEUE_BARS]
        preempted = np.array([env.server.state.generated[e] > 0 for e in waiting], dtype=bool)
        if preempted.any():
            bars = _queue_bars(frame)[: len(waiting)]
            assert np.all(bars[preempted] == np.array(R.PURPLE, dtype=np.uint8))
            seen_preempted = True
        if seen_full and seen_preempted:
            break
    assert seen_full and seen_preempted


def test_no_rendering_state_without_a_frame_mode():
    for mode in (None, "ansi"):
        llm = LLMBatchingEnv(render_mode=mode, **SMALL["batch_env/LLMBatching-v0"])
        llm.reset(seed=0)
        llm.step(0)
        assert llm.server.timeline is None
        dyn = DynamicBatchingEnv(render_mode=mode)
        dyn.reset(seed=0)
        dyn.step(1)
        dyn.render()
        assert dyn._view is None


# -- modes, errors -------------------------------------------------------------------------
@pytest.mark.parametrize("env_id", list(ENVS))
def test_metadata_and_invalid_mode(env_id):
    cls = ENVS[env_id]
    assert cls.metadata["render_modes"] == ["human", "rgb_array", "ansi"]
    assert cls.metadata["render_fps"] > 0
    with pytest.raises(ValueError) as exc, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium.make's own warning about the mode
        gym.make(env_id, render_mode="rgb")
    msg = str(exc.value)
    assert "render_mode='rgb'" in msg and "[None, 'human', 'rgb_array', 'ansi']" in msg


@pytest.mark.parametrize("env_id", list(ENVS))
@pytest.mark.parametrize("mode", ["rgb_array", "human", "ansi"])
def test_render_before_reset_raises(env_id, mode):
    env = ENVS[env_id](render_mode=mode)
    with pytest.raises(ResetNeeded, match=r"render: call reset\(\) before"):
        env.render()


@pytest.mark.parametrize("env_id", list(ENVS))
def test_ansi_unchanged(env_id):
    env = gym.make(env_id, render_mode="ansi", **SMALL[env_id])
    env.reset(seed=0)
    text = env.render()
    assert isinstance(text, str) and "queue=" in text


@pytest.mark.parametrize("env_id", list(ENVS))
def test_human_without_display_warns_once_and_prints_text(env_id, monkeypatch, capsys):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(R.sys, "platform", "linux")
    env = gym.make(env_id, render_mode="human", **SMALL[env_id])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)  # renders by itself (Gymnasium's convention for human mode)
        rng = np.random.default_rng(0)
        for _ in range(3):
            env.step(_random_valid(env, rng))
        assert env.render() is None
    ours = [w for w in caught if "no display is available" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    assert "render_mode='rgb_array'" in str(ours[0].message)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "queue=" in ln]
    assert len(lines) == 5  # reset, three steps, the explicit render
    env.close()


def test_human_with_a_display_but_no_window_library_falls_back(monkeypatch, capsys):
    import matplotlib

    monkeypatch.setattr(R, "display_available", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "pygame", None)  # "not installed"
    monkeypatch.setattr(matplotlib, "get_backend", lambda: "agg")
    env = DynamicBatchingEnv(render_mode="human")
    with pytest.warns(UserWarning, match=r"pygame cannot open a window.*'agg' is not interactive"):
        env.reset(seed=0)
    assert env._human.backend == "text"
    assert "queue=" in capsys.readouterr().out


# -- Gymnasium and SB3 integration ---------------------------------------------------------
@pytest.mark.parametrize("env_id", list(ENVS))
def test_make_and_check_env_with_rgb_array(env_id):
    env = gym.make(env_id, render_mode="rgb_array", **SMALL[env_id])
    assert env.render_mode == "rgb_array"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="render_mode='human': no display")
        check_env(env.unwrapped)  # includes the render checks of every declared mode
    env.reset(seed=0)
    assert env.render().shape == SHAPE
    env.close()


@pytest.mark.parametrize("env_id", list(ENVS))
def test_record_video_writes_an_mp4(env_id, tmp_path):
    pytest.importorskip("moviepy")
    from gymnasium.wrappers import RecordVideo

    env = RecordVideo(
        gym.make(env_id, render_mode="rgb_array", **SMALL[env_id]),
        video_folder=str(tmp_path / "videos"),
        episode_trigger=lambda ep: True,
        disable_logger=True,
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(400):
        if env.step(_random_valid(env, rng))[3]:
            break
    env.close()
    videos = list((tmp_path / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(videos[0]))
    meta = next(reader)
    assert tuple(meta["size"]) == (R.WIDTH, R.HEIGHT)
    assert meta["fps"] == ENVS[env_id].metadata["render_fps"]
    reader.close()


def test_sb3_make_vec_env_from_id():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.env_util import make_vec_env

    venv = make_vec_env(
        "batch_env/DynamicBatching-v0", n_envs=2, env_kwargs={"horizon_requests": 20}
    )
    assert venv.get_attr("render_mode") == ["rgb_array", "rgb_array"]
    venv.reset()
    venv.step(np.array([1, 1]))
    images = venv.get_images()
    assert [im.shape for im in images] == [SHAPE, SHAPE]
    venv.close()


# -- the drawing helper --------------------------------------------------------------------
def test_sla_colors():
    c = R.sla_colors(np.array([0.0, 0.5, 1.0, 1.0000001, 7.0, np.nan]))
    assert c.dtype == np.uint8 and c.shape == (6, 3)
    assert tuple(c[0]) == (60, 200, 90)  # green
    assert not np.array_equal(c[2], RED)  # exactly the SLA meets it
    assert np.array_equal(c[3], RED) and np.array_equal(c[4], RED)
    assert np.array_equal(c[5], c[0])


def test_canvas_primitives_and_clipping():
    c = R.Canvas(20, 30, background=(0, 0, 0))
    c.freeze()
    img = c.begin()
    c.columns(2, 10, 8, np.array([0.0, 0.5, 1.0, 2.0]), (255, 0, 0), back=(0, 0, 0))
    heights = (img[2:10, [2, 6, 10, 14], 0] == 255).sum(axis=0)
    assert heights.tolist() == [0, 4, 8, 8]
    assert not img[:, [5, 9, 13]].any()  # gaps
    end = c.text(1, 12, "A1", (0, 255, 0))
    assert end == 9 and img[12:17, 1:8, 1].any() and not img[12:17, 1:8, 0].any()
    # off the edges: drawn where it fits, no error
    c.text(25, 18, "HELLO", (0, 0, 255), scale=2)
    c.text(-3, -2, "X", (0, 0, 255))
    c.columns(-4, 25, 30, np.ones(20), np.zeros((20, 3), np.uint8))
    c.gauge(0, 0, 30, 2, 0.5, (9, 9, 9))
    assert (img[0, :, 0] == 9).sum() == 15
    assert not c.begin().any()  # a new frame starts from the frozen background
    with pytest.raises(ValueError, match=r"height=0.*expected ints >= 1"):
        R.Canvas(0, 10)


def test_timeline_ring_order():
    t = R.Timeline(4)
    for i in range(6):
        t.push(i, 10 * i, i % 2)
    sizes, lat, kinds = t.arrays()
    assert sizes.tolist() == [2, 3, 4, 5] and lat.tolist() == [20, 30, 40, 50]
    assert kinds.tolist() == [0, 1, 0, 1] and len(t) == 4
    t.clear()
    assert len(t) == 0 and len(t.arrays()[0]) == 0
    with pytest.raises(ValueError, match=r"n=0 is invalid"):
        R.Timeline(0)


def test_registered_ids_all_render():
    assert set(batch_env.ENV_IDS) == set(ENVS)


def test_bench_reports_frame_cost_ratio():
    from experiments.bench.render import bench_render

    result = bench_render(n_steps=40, repeats=1)
    rows = result["envs"]
    assert [r["env_id"] for r in rows] == list(ENVS)
    for r in rows:
        assert r["step_us"] > 0 and r["frame_us"] > 0
        assert r["frame_cost_ratio_vs_step"] == pytest.approx(r["frame_us"] / r["step_us"])
    assert result["frame_shape"] == list(SHAPE)


def test_human_window_with_matplotlib(monkeypatch):
    """The matplotlib branch (a display, no pygame): frames go to one figure's image."""
    import matplotlib
    import matplotlib.pyplot as plt

    monkeypatch.setattr(R, "display_available", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "pygame", None)
    monkeypatch.setattr(matplotlib, "get_backend", lambda: "TkAgg")  # drawn with Agg here
    pauses = []
    monkeypatch.setattr(plt, "pause", pauses.append)
    env = DynamicBatchingEnv(render_mode="human")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        env.reset(seed=0)
        env.step(1)
    window = env._human
    assert window.backend == "matplotlib"
    _, fig, im = window._handle
    assert np.array_equal(im.get_array(), env._render_frame(env._view))
    assert pauses == [1.0 / DynamicBatchingEnv.metadata["render_fps"]] * 2
    env.close()
    assert window.backend is None and not plt.fignum_exists(fig.number)


def test_human_window_with_pygame(monkeypatch):
    """The pygame branch, with a stand-in module: each frame is blitted and flipped."""
    from types import SimpleNamespace

    calls = []
    surfaces = []

    def make_surface(a):
        surfaces.append(np.array(a))
        return a

    screen = SimpleNamespace(blit=lambda surf, pos: calls.append("blit"))
    fake = SimpleNamespace(
        init=lambda: calls.append("init"),
        display=SimpleNamespace(
            set_caption=lambda t: None,
            set_mode=lambda size: calls.append(size) or screen,
            flip=lambda: calls.append("flip"),
            quit=lambda: calls.append("quit"),
        ),
        event=SimpleNamespace(pump=lambda: None),
        surfarray=SimpleNamespace(make_surface=make_surface),
        time=SimpleNamespace(Clock=lambda: SimpleNamespace(tick=lambda fps: calls.append(fps))),
    )
    monkeypatch.setattr(R, "display_available", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "pygame", fake)
    env = NodeBatchingEnv(render_mode="human")
    env.reset(seed=0)
    env.step(3)
    assert calls[:2] == ["init", (R.WIDTH, R.HEIGHT)]
    assert calls.count("flip") == 2 and calls.count(NodeBatchingEnv.metadata["render_fps"]) == 2
    assert surfaces[-1].shape == (R.WIDTH, R.HEIGHT, 3)  # pygame surfaces are x-major
    assert np.array_equal(surfaces[-1].swapaxes(0, 1), env._render_frame(env._view))
    env.close()
    assert calls[-1] == "quit"
