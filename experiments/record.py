"""``batch-env record``: watch a policy serve, as a video or as PNG frames.

``batch-env record RUN_OR_POLICY --out video.mp4`` makes the env with
``render_mode="rgb_array"`` (the frames of ``docs/render.md``: the queue against the SLA,
what is in service, a timeline), lets the policy act for ``--episodes`` seeded episodes
of at most ``--max-frames`` steps each, and writes them:

* with the ``video`` extra (``pip install 'batch-env[video]'``: moviepy), through
  Gymnasium's ``RecordVideo``, one file per episode (``--out`` itself for one episode,
  ``<stem>-episode-<k><suffix>`` for several), at the env's ``render_fps``;
* without it, or with an ``--out`` that is a folder (no suffix), every frame as a PNG
  (:func:`batch_env.render.write_png`, no imaging package needed) in
  ``<out>/episode-<k>/frame-<step>.png``, and the command says why.

``RUN_OR_POLICY`` is a training run (its folder, or ``<algo>:<run_dir>`` as ``batch-env
evaluate`` takes it; by default it acts on the env the run was trained on), or a
baseline's name (``greedy``, ``smdp``, ...; by default on ``batch_env/DynamicBatching-v0``).
``--env-id`` and ``--env-kwargs`` choose another env or change the run's kwargs.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import tempfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

import baselines
from agents import load_policy
from agents.common import check_int, make_raw_env
from agents.policy import parse_policy_spec, read_run_config
from experiments.harness.config import parse_mapping as mapping
from experiments.harness.options import POLICY_SETTINGS_HELP, add_json, count, env_id_arg, is_agent
from experiments.harness.strict_json import dumps

#: the env a baseline is recorded on when no --env-id is given
DEFAULT_ENV_ID = "batch_env/DynamicBatching-v0"
#: what RecordVideo writes (moviepy)
VIDEO_SUFFIXES = (".mp4",)


def _resolve_policy(spec: str) -> tuple[str, str | None, dict[str, Any] | None]:
    """``(label, run_dir or None, the run's config or None)`` of ``RUN_OR_POLICY``."""

    if is_agent(spec):
        _, run_dir = parse_policy_spec(spec)
        return spec, str(run_dir), read_run_config(run_dir)
    if Path(spec).is_dir():
        cfg = read_run_config(spec)
        return f"{cfg['algo']}:{spec}", spec, cfg
    if ":" in spec:  # a baseline with its settings, name:key=value,...
        baselines.parse_spec(spec)
        return spec, None, None
    if spec not in baselines.available():
        raise ValueError(
            f"RUN_OR_POLICY={spec!r} is neither a run folder, <algo>:<run_dir>, nor a baseline: "
            f"the baselines are {', '.join(baselines.available())}"
        )
    return spec, None, None


def _writes_video(out: Path) -> tuple[bool, str]:
    """Whether ``out`` gets a video (else PNG frames), and why not when not."""
    if out.suffix.lower() not in VIDEO_SUFFIXES:
        return False, f"--out {str(out)!r} has no video suffix ({', '.join(VIDEO_SUFFIXES)})"
    if importlib.util.find_spec("moviepy") is None:
        return False, "moviepy is not installed (pip install 'batch-env[video]')"
    return True, ""


def record(
    spec: str,
    out: str | Path,
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    episodes: int = 1,
    seed: int = 0,
    max_frames: int = 1000,
) -> dict[str, Any]:
    """Record ``spec`` acting on an env (see the module docstring).

    :param spec: a run folder, ``<algo>:<run_dir>`` or a baseline's name.
    :param out: the video file (``.mp4``), or a folder for PNG frames.
    :param env_id: the env (default: the run's, or :data:`DEFAULT_ENV_ID`).
    :param env_kwargs: its kwargs (over the run's when the env is the run's).
    :param episodes: episodes to record, seeds ``seed``, ``seed + 1``, ...
    :param seed: the first episode's seed.
    :param max_frames: steps recorded per episode at most (an episode is thousands of
        decisions; the recording stops there, the episode need not end).
    :returns: ``{"policy", "env_id", "env_kwargs", "files", "frames", "video", "why_frames"}``.
    :raises ValueError: for an unknown policy, an env without ``rgb_array`` frames, or
        counts below 1 (nothing is written then).
    """

    check_int("episodes", episodes, 1)
    check_int("max_frames", max_frames, 1)
    check_int("seed", seed, 0)
    label, run_dir, cfg = _resolve_policy(spec)
    kwargs = dict(env_kwargs or {})
    if env_id is None:
        env_id = str(cfg["env_id"]) if cfg is not None else DEFAULT_ENV_ID
        kwargs = {**(dict(cfg["env_kwargs"]) if cfg is not None else {}), **kwargs}
    out = Path(out)
    video, why = _writes_video(out)
    env = make_raw_env(env_id, {**kwargs, "render_mode": "rgb_array"}, "--env-kwargs")
    if "rgb_array" not in (env.metadata.get("render_modes") or []):
        env.close()
        raise ValueError(f"--env-id={env_id!r} draws no rgb_array frames to record")
    policy = _make_policy(label, run_dir, env)
    try:
        if video:
            files, frames = _record_video(env, policy, out, episodes, seed, max_frames)
        else:
            files, frames = _record_frames(env, policy, out, episodes, seed, max_frames)
    finally:
        env.close()
    return {
        "policy": label,
        "env_id": env_id,
        "env_kwargs": kwargs,
        "files": [str(f) for f in files],
        "frames": frames,
        "video": video,
        "why_frames": why,
    }


def _make_policy(label: str, run_dir: str | None, env: gym.Env) -> Any:

    if run_dir is not None:
        return load_policy(run_dir, name=label)
    name, params = baselines.parse_spec(label)
    return baselines.make(name, env=env, **params)


def _episodes(env: gym.Env, policy: Any, episodes: int, seed: int, max_frames: int) -> Any:
    """Step the policy; yield ``(episode, step)`` after every reset and step, at most
    ``max_frames`` steps an episode."""
    for k in range(episodes):
        policy.reset()
        obs, info = env.reset(seed=seed + k)
        yield k, 0
        for step in range(1, max_frames + 1):
            obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
            yield k, step
            if terminated or truncated:
                break


def _record_frames(
    env: gym.Env, policy: Any, out: Path, episodes: int, seed: int, max_frames: int
) -> tuple[list[Path], int]:
    from batch_env.render import write_png

    folder = out.with_suffix("") if out.suffix else out
    files: list[Path] = []
    for k, step in _episodes(env, policy, episodes, seed, max_frames):
        where = folder / f"episode-{k}"
        where.mkdir(parents=True, exist_ok=True)
        frame = env.render()
        assert isinstance(frame, np.ndarray)
        files.append(where / f"frame-{step:06d}.png")
        write_png(files[-1], frame)
    return files, len(files)


def _record_video(
    env: gym.Env, policy: Any, out: Path, episodes: int, seed: int, max_frames: int
) -> tuple[list[Path], int]:
    from gymnasium.wrappers import RecordVideo

    tmp = Path(tempfile.mkdtemp(prefix="batch-env-record-"))
    try:
        rec = RecordVideo(
            env,
            video_folder=str(tmp / "videos"),  # a new folder: RecordVideo warns on an old one
            name_prefix="episode",
            episode_trigger=lambda _: True,
            disable_logger=True,
        )
        frames = sum(1 for _ in _episodes(rec, policy, episodes, seed, max_frames))
        rec.close()  # writes the last episode's video
        made = sorted(
            (tmp / "videos").glob("episode-episode-*.mp4"),
            key=lambda p: int(p.stem.rsplit("-", 1)[-1]),
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        files = []
        for k, path in enumerate(made):
            dest = out if len(made) == 1 else out.with_name(f"{out.stem}-episode-{k}{out.suffix}")
            shutil.move(str(path), dest)
            files.append(dest)
        return files, frames
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cmd_record(args: argparse.Namespace) -> int:
    """Record a trained run or a baseline serving an env: a video (RecordVideo, with the
    video extra) or, without it, the frames as PNG files (see experiments/record.py)."""

    res = record(
        args.policy,
        args.out,
        env_id=args.env_id,
        env_kwargs=args.env_kwargs,
        episodes=args.episodes,
        seed=args.seed,
        max_frames=args.max_frames,
    )
    if args.json:
        print(dumps(res, indent=1))
        return 0
    if res["video"]:
        print(
            f"wrote {', '.join(res['files'])} ({res['frames']} frames of {res['policy']} on {res['env_id']})"
        )
    else:
        folder = Path(res["files"][0]).parent.parent if res["files"] else Path(args.out)
        print(
            f"{res['why_frames']}: wrote {res['frames']} PNG frames of {res['policy']} on "
            f"{res['env_id']} in {folder}/",
        )
    return 0


def add_parser(sub: Any) -> None:
    """The ``record`` subcommand's parser."""

    def env_kwargs(text: str) -> Any:
        try:
            return mapping(text, "--env-kwargs")
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    p = sub.add_parser(
        "record",
        help="record a run or a baseline serving an env: a video, or PNG frames",
        description=(__doc__ or "").split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "policy",
        metavar="RUN_OR_POLICY",
        help="a run folder, <algo>:<run_dir>, or a baseline (greedy, smdp, ...): "
        + POLICY_SETTINGS_HELP,
    )
    p.add_argument(
        "--out",
        default="video.mp4",
        help="the video (.mp4; needs the video extra), or a folder for PNG "
        "frames (default video.mp4; without moviepy the frames go to video/)",
    )
    p.add_argument(
        "--env-id",
        default=None,
        type=env_id_arg,
        help=f"the env, with or without batch_env/ (default: the run's own; for a baseline {DEFAULT_ENV_ID})",
    )
    p.add_argument(
        "--env-kwargs",
        type=env_kwargs,
        default=None,
        help="env kwargs mapping (over the run's own when the env is the run's)",
    )
    p.add_argument("--episodes", type=count(1), default=1, help="episodes to record (default 1)")
    p.add_argument("--seed", type=count(0), default=0, help="the first episode's seed (default 0)")
    p.add_argument(
        "--max-frames",
        type=count(1),
        default=1000,
        help="steps recorded per episode at most (default 1000; an episode may be longer)",
    )
    add_json(p)
    p.set_defaults(func=cmd_record)


__all__ = ["add_parser", "cmd_record", "record"]
