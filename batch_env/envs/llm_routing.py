"""``LLMRouting-v0``: where each request of a cluster of LLM replicas is served, one
decision per arrival (:class:`LLMRoutingEnv`).

The MDP over :class:`batch_env.llm.cluster.LLMCluster` (``docs/design.md``: A cluster of
replicas, and LLMRouting-v0): spaces, observation, mask, reward, info, reset, step.
"""

from __future__ import annotations

import inspect
from dataclasses import MISSING, fields
from typing import Any

import numpy as np
from gymnasium import spaces

from ..config import LLMConfigV2
from ..core import ServingEnv
from ..llm.cluster import LLMCluster
from ..render import ClusterView
from ..workload import Workload
from .features import ObsFeature, features_box

#: the per-replica features of the observation: (name, meaning, unit, scale)
_REPLICA_FEATURES = (
    ("waiting_over_max_num_seqs", "requests not yet in a batch (routed ones included)",
     "requests", "/ its max_num_seqs, clipped at 100"),
    ("running_over_max_num_seqs", "requests in a batch", "requests",
     "/ its max_num_seqs, clipped at 100"),
    ("kv_usage", "KV blocks in use / its blocks", "fraction", "as is"),
    ("cached_fraction", "blocks its prefix cache holds / its blocks", "fraction",
     "as is (0 without prefix caching)"),
    ("prefix_hit_fraction", "the arriving prompt's tokens cached there", "fraction",
     "cached tokens / prompt tokens"),
    ("ttft_recent_over_sla", "mean TTFT of its last 16 first tokens", "s",
     "/ the TTFT SLA, clipped at 100 (0 before any)"),
)  # fmt: skip
_NO_COSTS = {"latency": 0.0, "energy": 0.0, "sla": 0.0, "drop": 0.0}


class LLMRoutingEnv(ServingEnv):
    """Route each arriving request to one of ``N`` LLM replicas.

    A cluster (:class:`batch_env.llm.cluster.LLMCluster`) of replicas, each an LLM server
    with its own scheduler, KV and prefix cache (``LLMBatching-v2``'s, at one setting:
    vLLM's defaults unless a replica's ``setting`` says otherwise), on one clock. At each
    arrival the agent picks the replica that takes it; the replicas batch on their own.

    ## Arguments

    * ``replicas``: a list of replica specs, each a dict with ``profile`` (default
      ``"llama-2-7b-a100"``), optional ``clock_mhz``, ``setting`` (``[cap, budget, order,
      clock_index]``) and any ``LLMBatching-v2`` configuration field, over the env's own
      ``settings``; or an integer ``N``: that many replicas of the env's settings.
      Default 4.
    * ``workload``: the arrivals (as ``LLMBatching-v2``'s; a workload with prefix
      information turns prefix caching on in every replica).
    * ``settings``: ``LLMBatching-v2`` configuration fields shared by every replica
      (``horizon_requests``, ``warmup_requests``, ``reward_weights``, ``ttft_sla_ms``, ...).
    * ``render_mode``: ``None``, ``"ansi"`` (a line of text per replica), ``"rgb_array"``
      or ``"human"`` (a row per replica: waiting, running, KV use; the last routed
      replica marked: :class:`batch_env.render.ClusterView`).
    * ``reward_timing``: ``"commit"`` (default) or ``"accrue"`` (Reward, below).

    ## Action space

    ``Discrete(N)``: the replica. :meth:`~batch_env.envs.llm_routing.LLMRoutingEnv.action_masks` gives those whose
    ``max_model_len`` the arriving prompt fits; a masked replica is refused
    (``ValueError``).

    ## Observation

    Per replica (in replica order): waiting and running requests / its ``max_num_seqs``,
    its KV usage, its prefix cache's share of its blocks, the share of the arriving
    prompt cached there, its recent TTFT / the TTFT SLA; then the arriving prompt's
    tokens / ``max_model_len`` (:attr:`~batch_env.envs.llm_routing.LLMRoutingEnv.observation_features` names them).

    ## Reward

    Minus the cost the replicas committed between two decisions: the weighted sum of the
    latency integral, energy, SLA misses and drops summed over the replicas (each
    commits at its iteration boundaries, so a step's cost is that of the iterations that
    ended in it); over an episode the rewards add up to its cost. With
    ``reward_timing="accrue"`` a step is charged the latency and energy accrued in its
    own span instead, the iterations in progress included
    (:meth:`~batch_env.llm.cluster.LLMCluster.accrued_costs`): the same sum over an
    episode, spread in time as the cost is incurred (misses and drops are charged when
    they happen, in both).

    ## Info

    ``action_mask`` (:meth:`~batch_env.envs.llm_routing.LLMRoutingEnv.action_masks`; at
    the end all true); ``dt_s``: the time from the last decision; ``now_s``: the clock; ``replicas``: what a router can know of each replica now
    (:meth:`batch_env.llm.cluster.LLMCluster.replica_view`: queues, KV and cache, the arriving request's cached
    blocks there, recent TTFT); ``prompt_tokens`` and ``request_class`` of the arriving
    request; ``reward_components`` (the step's latency, energy, sla, drop); ``request_counts``
    (over the cluster); at the end ``serving`` (the cluster's summary, with
    ``serving["replicas"]`` each replica's and ``serving["routed"]`` the arrivals each
    took).

    ## Episode end

    As ``LLMBatching-v2``: truncated once every summary request is done or at the
    horizon.

    ## Version History

    * v0: initial version.
    """

    metadata = {"render_modes": ["human", "rgb_array", "ansi"], "render_fps": 10}

    def __init__(
        self,
        replicas: int | list[dict[str, Any]] = 4,
        workload: dict | Workload | None = None,
        *,
        render_mode: str | None = None,
        task: str | None = None,
        reward_timing: str = "commit",
        **settings: Any,
    ) -> None:
        """The env (class docstring: Arguments)."""
        if reward_timing not in ("commit", "accrue"):
            raise ValueError(
                f"reward_timing={reward_timing!r} is invalid: 'commit' (the cost committed "
                "between decisions) or 'accrue' (the cost accrued in each step's span)"
            )
        self._accrue = reward_timing == "accrue"
        self.task = task
        self._set_render_mode(render_mode)
        if isinstance(replicas, bool) or not isinstance(replicas, (int, list, tuple)):
            raise ValueError(
                f"replicas={replicas!r} is invalid: a number of replicas (1..1024) or a list "
                "of replica specs (dicts)"
            )
        if isinstance(replicas, int):
            if not 1 <= replicas <= 1024:
                raise ValueError(f"replicas={replicas} is invalid: a number in 1..1024")
            replicas = [{} for _ in range(replicas)]
        #: the cluster this env routes for
        self.cluster = LLMCluster.build(list(replicas), workload, **settings)
        first = self.cluster.replicas[0]
        self.workload, self.config, self.profile = first.workload, first.config, first.profile
        self.executor = first.executor
        self.horizon_s, self.mean_rate_per_s = self.cluster.horizon_s, first.mean_rate_per_s
        self.n_replicas = self.cluster.n
        self.action_space = spaces.Discrete(self.n_replicas)
        self._features = _features(self.n_replicas)
        self.observation_space = features_box(self._features)
        self._max_model_len = max(r.max_model_len for r in self.cluster.replicas)
        self._ttft_sla_s = first.ttft_scale_s
        w = first.config.reward_weights
        self._weights = (w.latency, w.energy, w.sla, w.drop)
        self._g: int | None = None

    @property
    def observation_features(self) -> tuple[ObsFeature, ...]:
        """The observation's entries, in order."""
        return self._features

    def get_config(self) -> dict[str, Any]:
        """The env's resolved configuration: the first replica's (profile, workload,
        configuration) and each replica's profile and configuration under ``replicas``."""
        out = super().get_config()
        out["replicas"] = [
            {"profile": r.profile.name, "setting": list(r.setting), **r.config.to_dict()}
            for r in self.cluster.replicas
        ]
        return out

    def action_masks(self) -> np.ndarray:
        """The replicas the arriving request may go to (its prompt fits their
        ``max_model_len``)."""
        self._check_started("action_masks")
        return self._replicas["mask"].copy()

    # -- Gymnasium API ----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: every replica empty, the arrivals drawn from ``seed``, and run
        to the first arrival.

        :param seed: episode seed; ``None`` draws one from the env's ``np_random``.
        :param options: ``{"load": x}`` on a workload with a ``load_range``; nothing else.
        """
        super().reset(seed=seed)
        cl = self.cluster
        cl.reset(self._episode_seed(seed), options)
        self._base = cl.costs()  # (every replica at 0: nothing accrued)
        self._g = cl.next_arrival()
        if self._g is None:
            rejected = len(cl.intake.rejected_at)
            why = (
                f"every one of its {rejected} arrivals was rejected: no prompt fits any "
                f"replica's max_model_len (the largest {self._max_model_len})"
                if rejected
                else "a horizon_s shorter than the first arrival, or a workload without arrivals"
            )
            raise ValueError(f"LLMRouting-v0: the episode ended before its first arrival ({why})")
        self._episode_started()
        out = self._obs(), self._info(dict(_NO_COSTS), 0.0)
        if self.render_mode == "human":
            self.render()
        return out

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Route the arriving request to replica ``action`` and run to the next arrival
        (or the episode's end).

        :raises ValueError: an action out of range, or a masked replica (naming it).
        """
        a = self._checked_action(action)
        cl = self.cluster
        cl.route(a)
        t0 = cl.now
        self._g = cl.next_arrival()
        dt = cl.now - t0
        L, E, M, D = cl.accrued_costs() if self._accrue and self._g is not None else cl.costs()
        L0, E0, M0, D0 = self._base
        self._base = (L, E, M, D)
        comps = {"latency": L - L0, "energy": E - E0, "sla": M - M0, "drop": float(D - D0)}
        wl, we, ws, wd = self._weights
        reward = -(
            wl * comps["latency"] + we * comps["energy"] + ws * comps["sla"] + wd * comps["drop"]
        )
        if self._g is None:
            summary = cl.summary()
            self._end_episode(summary, cl.now)
            info = {
                "action_mask": np.ones(self.n_replicas, dtype=bool),
                "reward_components": comps,
                "dt_s": dt,
                "now_s": cl.now,
                "request_counts": cl.request_counts(),
                "serving": summary,
            }
            out = self._obs(), float(reward), False, True, info
        else:
            out = self._obs(), float(reward), False, False, self._info(comps, dt)
        if self.render_mode == "human":
            self.render()
        return out

    def request_counts(self) -> dict[str, int]:
        """Where every arrival is now, over the cluster (:meth:`LLMCluster.request_counts`)."""
        self._check_started("request_counts")
        return self.cluster.request_counts()

    # -- observation and info ----------------------------------------------------------------
    def _obs(self) -> np.ndarray:
        """The observation now (at the episode's end: no arriving request, its features
        0)."""
        g = self._g
        v = self._replicas = self.cluster.replica_view(g)
        prompt = self.cluster.intake.record(g)[0] if g is not None else 0
        cap = np.maximum(v["max_num_seqs"], 1)
        per = np.stack(
            [
                np.minimum(v["waiting"] / cap, 100.0),
                np.minimum(v["running"] / cap, 100.0),
                v["kv_usage"],
                v["cached_fraction"],
                np.minimum(v["prefix_blocks"] * v["block_size"] / max(prompt, 1), 1.0),
                np.minimum(v["ttft_recent_s"] / self._ttft_sla_s, 100.0),
            ],
            axis=1,
        )
        obs = np.concatenate([per.ravel(), [min(prompt / self._max_model_len, 1.0)]])
        return obs.astype(np.float32)

    def _info(self, comps: dict[str, float], dt: float) -> dict[str, Any]:
        g = self._g
        assert g is not None
        prompt, _o, _clipped, cls, _h = self.cluster.intake.record(g)
        return {
            "action_mask": self._replicas["mask"].copy(),
            "replicas": self._replicas,
            "prompt_tokens": prompt,
            "request_class": cls,
            "reward_components": comps,
            "dt_s": dt,
            "request_counts": self.cluster.request_counts(),
            "now_s": self.cluster.now,
        }

    def _render_text(self) -> str:
        """The clock, the waiting requests over the cluster, and one line per replica: its
        waiting and running requests and KV use."""
        cl = self.cluster
        queue = sum(len(rep.state.waiting) + rep.unadmitted for rep in cl.replicas)
        lines = [f"t={cl.now:10.3f} s  queue={queue:5d}  routed={len(cl.routed)}"]
        for r, rep in enumerate(self.cluster.replicas):
            st = rep.state
            lines.append(
                f"  [{r}] {rep.profile.name:24s} waiting={len(st.waiting) + rep.unadmitted:5d} "
                f"running={rep.in_service_count():4d}  KV {st.kv.used}/{st.kv.total}"
            )
        return "\n".join(lines)

    def _make_view(self) -> Any:
        """The frame layout (:class:`batch_env.render.ClusterView`)."""
        return ClusterView("LLMROUTING-V0")

    def _render_frame(self, view: Any) -> np.ndarray:
        """The frame: the cluster now, the last routed replica marked."""
        routed = self.cluster.routed
        return view.frame(self.cluster, routed[-1] if routed else None)

    @property
    def engine(self) -> Any:
        """The cluster this env runs (what :meth:`upcoming_input` reads)."""
        return self.cluster


def _signature() -> inspect.Signature:
    """The constructor's signature: ``replicas`` and ``workload``, then ``LLMBatching-v2``'s
    configuration fields (shared by every replica) with their defaults, keyword-only,
    then ``render_mode`` and ``task`` (what ``ServingEnv`` checks kwargs against and
    ``help()`` shows)."""
    own = list(inspect.signature(LLMRoutingEnv.__init__).parameters.values())
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = own[:3]
    for f in fields(LLMConfigV2):
        default = None if f.default is MISSING else f.default
        params.append(inspect.Parameter(f.name, keyword, default=default))
    return inspect.Signature([*params, *own[3:6]], return_annotation=None)


def _features(n: int) -> tuple[ObsFeature, ...]:
    """The observation's entries for ``n`` replicas."""
    out = []
    for r in range(n):
        for name, meaning, unit, scale in _REPLICA_FEATURES:
            high = 100.0 if "clipped at 100" in scale else 1.0
            out.append(ObsFeature(f"replica{r}.{name}", meaning, unit, scale, 0.0, high))
    out.append(
        ObsFeature(
            "prompt_over_max_model_len",
            "the arriving request's prompt tokens",
            "tokens",
            "/ the largest max_model_len, clipped at 1",
            0.0,
            1.0,
        )
    )
    return tuple(out)


LLMRoutingEnv.__init__.__signature__ = _signature()  # type: ignore[attr-defined]
