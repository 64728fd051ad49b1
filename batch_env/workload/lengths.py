"""Prompt and output lengths of LLM requests (``LLMBatching-v0``): :class:`RequestLengths`."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ..checks import nonnegative, positive
from .traces import check_llm_tokens, dataset_path, load_trace

__all__ = ["LENGTH_KINDS", "RequestLengths", "make_lengths"]

# ----------------------------------------------------------------------------------
# Request lengths (LLMBatching-v0)
# ----------------------------------------------------------------------------------


def _lognormal_params(mean: float, cv: float) -> tuple[float, float]:
    """``(mu, sigma)`` of the lognormal with this mean and coefficient of variation."""
    s2 = math.log1p(cv * cv)
    return math.log(mean) - s2 / 2.0, math.sqrt(s2)


#: Kinds of :class:`RequestLengths`.
LENGTH_KINDS = ("lognormal", "fixed", "empirical", "trace")


@dataclass(frozen=True)
class RequestLengths:
    """Prompt and output token counts of LLM requests (docs/design.md: LLMBatching-v0).

    Drawn from the env's request-size stream (the third child stream), one pair per
    arrival, so two policies on the same seed see the same requests.

    * ``lognormal`` (default): independent lognormals with the given means and
      coefficients of variation, rounded to integers >= 1. The defaults are the
      Azure LLM conversation trace's (2023, dataset ``azure-conv-2023``):
      prompt mean 1155 tokens, CV 0.96; output mean 211 tokens, CV 0.77.
    * ``fixed``: every request has ``prompt_tokens`` and ``output_tokens``.
    * ``empirical``: pairs (prompt, output) sampled uniformly with replacement from the
      rows of an Azure-format CSV (``path``, or a named ``dataset`` of
      :mod:`batch_env.workload.datasets`; columns ``ContextTokens``, ``GeneratedTokens``), keeping their
      joint distribution.
    * ``trace``: the lengths come with the arrivals (a ``trace`` workload with token
      columns), row by row.

    :param kind: one of :data:`LENGTH_KINDS`.
    :param prompt_tokens: mean (lognormal) or value (fixed) of the prompt length.
    :param output_tokens: mean (lognormal) or value (fixed) of the output length.
    :param prompt_cv: lognormal coefficient of variation of the prompt length.
    :param output_cv: lognormal coefficient of variation of the output length.
    :param path: CSV file for ``empirical``.
    :param dataset: instead of ``path``, a dataset name (``azure-conv-2023``; a shipped
        excerpt or a file fetched with ``batch-env data fetch NAME``, never downloaded here).
    """

    kind: str = "lognormal"
    prompt_tokens: float = 1155.0
    output_tokens: float = 211.0
    prompt_cv: float = 0.96
    output_cv: float = 0.77
    path: str | None = None
    dataset: str | None = None

    def __post_init__(self) -> None:
        """Validate the fields (ValueError naming the field, value and what is allowed)."""
        if self.kind not in LENGTH_KINDS:
            raise ValueError(
                f"lengths.kind={self.kind!r} is invalid: allowed values are {LENGTH_KINDS}"
            )
        for name in ("prompt_tokens", "output_tokens"):
            v = positive(getattr(self, name), name, "lengths")
            if v < 1:
                raise ValueError(f"lengths.{name}={v!r} is out of range: expected a number >= 1")
            if self.kind == "fixed" and v != int(v):
                raise ValueError(f"lengths.{name}={v!r} is invalid: fixed lengths are integers")
            object.__setattr__(self, name, v)
        for name in ("prompt_cv", "output_cv"):
            object.__setattr__(self, name, nonnegative(getattr(self, name), name, "lengths"))
        if self.dataset is not None and self.kind != "empirical":
            raise ValueError(
                f"lengths.dataset={self.dataset!r} is only allowed with kind 'empirical'"
            )
        if self.kind == "empirical":
            file = dataset_path(self.dataset, self.path, "lengths")
            if file is not None:
                object.__setattr__(self, "path", file)
            if not isinstance(self.path, (str, os.PathLike)) or not os.fspath(self.path):
                raise ValueError(
                    f"lengths.path={self.path!r} is invalid: 'empirical' needs a CSV path "
                    "or a dataset name (dataset=...)"
                )
            if not os.path.isfile(self.path):
                raise ValueError(f"lengths.path={self.path!r}: file not found")
            check_llm_tokens(
                *self._table(), f"lengths.path={self.path!r}", ("ContextTokens", "GeneratedTokens")
            )
        elif self.path is not None:
            raise ValueError(f"lengths.path={self.path!r} is only allowed with kind 'empirical'")

    def _table(self) -> tuple[np.ndarray, np.ndarray]:
        """The (prompt, output) columns of the empirical CSV (cached, validated)."""
        path = cast("str | os.PathLike[str]", self.path)  # set for kind "empirical" (__post_init__)
        st = os.stat(path)
        data = load_trace(
            os.path.abspath(path),
            st.st_mtime_ns,
            st.st_size,
            "TIMESTAMP",
            "ContextTokens",
            "GeneratedTokens",
        )
        if data.prompt_tokens is None or data.output_tokens is None:
            raise ValueError(
                f"lengths.path={self.path!r}: needs columns 'ContextTokens' and 'GeneratedTokens'"
            )
        return data.prompt_tokens, data.output_tokens

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` (prompt, output) pairs as int64 arrays (``trace``: not drawn here).

        :param rng: the request-size generator.
        :param n: number of requests.
        """
        if self.kind == "fixed":
            return (
                np.full(n, int(self.prompt_tokens), np.int64),
                np.full(n, int(self.output_tokens), np.int64),
            )
        if self.kind == "empirical":
            p, o = self._table()
            idx = rng.integers(0, p.size, n)
            return p[idx].astype(np.int64), o[idx].astype(np.int64)
        if self.kind == "trace":
            raise ValueError(
                "lengths.kind='trace' takes the lengths from a trace workload's token columns"
            )
        out = []
        for mean, cv in (
            (self.prompt_tokens, self.prompt_cv),
            (self.output_tokens, self.output_cv),
        ):
            if cv == 0.0:
                out.append(np.full(n, max(1, round(mean)), np.int64))
                continue
            x = rng.lognormal(*_lognormal_params(mean, cv), n)
            out.append(np.maximum(np.rint(x), 1).astype(np.int64))
        return out[0], out[1]

    def output_given(self, rng: np.random.Generator, generated: np.ndarray) -> np.ndarray:
        """Output lengths drawn given that each request has generated ``generated[i]``
        tokens and is not done: the law of the output length conditioned on exceeding
        it (what a planner may assume of a request in flight; the prompt is not
        conditioned on).

        ``empirical``: exact (uniform over the table's outputs above ``generated[i]``);
        ``fixed``: the fixed length, or ``generated[i] + 1`` past it; ``lognormal``: by
        rejection, 64 rounds at most, then ``generated[i] + 1``.

        :param rng: the planner's generator.
        :param generated: int array, tokens generated so far (>= 0).
        :raises ValueError: for ``trace`` lengths (no law to draw from).
        """
        g = np.asarray(generated, np.int64)
        if self.kind == "trace":
            raise ValueError(
                "lengths.kind='trace': the output lengths come with the trace's rows, and no "
                "law of them is known to draw a request's remaining output from"
            )
        if self.kind == "fixed":
            return np.maximum(int(self.output_tokens), g + 1)
        if self.kind == "empirical":
            return outputs_above(_sorted_outputs(self), rng, g)
        out = g + 1
        todo = np.arange(g.size)
        for _ in range(64):
            if not todo.size:
                break
            _, o = self.sample(rng, todo.size)
            ok = o > g[todo]
            out[todo[ok]] = o[ok]
            todo = todo[~ok]
        return out

    def fit_fraction(self, max_prompt: int) -> tuple[float, str]:
        """The fraction of drawn prompts of at most ``max_prompt`` tokens, and what was drawn.

        Exact for ``fixed`` and ``empirical``; for ``lognormal`` the fraction of draws that
        round to at most ``max_prompt`` (the lognormal CDF at ``max_prompt + 0.5``).

        :param max_prompt: the longest prompt that fits (``max_model_len - 1``).
        :returns: ``(fraction, description of the prompt lengths for messages)``.
        """
        if self.kind == "fixed":
            return float(
                self.prompt_tokens <= max_prompt
            ), f"lengths.prompt_tokens={int(self.prompt_tokens)}"
        if self.kind == "empirical":
            p, _ = self._table()
            return (
                float(np.count_nonzero(p <= max_prompt)) / p.size,
                f"the shortest prompt of lengths.path={self.path!r} has {int(p.min())} tokens",
            )
        if self.kind == "trace":
            raise ValueError(
                "lengths.kind='trace' takes the lengths from a trace workload's token columns"
            )
        mean, cv = self.prompt_tokens, self.prompt_cv
        what = f"the prompts are lognormal with mean lengths.prompt_tokens={mean:g} and CV {cv:g}"
        mu, sigma = _lognormal_params(mean, cv)
        if sigma == 0.0:  # no spread (a CV of 0, or so small that its square underflows)
            return float(max(1, round(mean)) <= max_prompt), what
        z = (math.log(max_prompt + 0.5) - mu) / sigma
        return 0.5 * math.erfc(-z / math.sqrt(2.0)), what

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (``make_lengths`` round-trips it; ``path`` None when ``dataset`` is set)."""
        d = dataclasses.asdict(self)
        if self.dataset is not None:
            d["path"] = None
        return d


def make_lengths(spec: RequestLengths | Mapping[str, Any] | None) -> RequestLengths:
    """Build :class:`RequestLengths` from itself, a dict of its fields, or ``None`` (defaults).

    :raises ValueError: on an unknown field or an invalid value, naming it.
    """
    if spec is None:
        return RequestLengths()
    if isinstance(spec, RequestLengths):
        return spec
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"lengths={spec!r} is invalid: expected a dict with a 'kind' in {LENGTH_KINDS}"
        )
    names = [f.name for f in dataclasses.fields(RequestLengths)]
    unknown = sorted(set(spec) - set(names))
    if unknown:
        raise ValueError(f"lengths has unknown field(s) {unknown}: allowed fields are {names}")
    return RequestLengths(**spec)


_SORTED_OUTPUTS: dict[tuple[str, int, int], np.ndarray] = {}


def outputs_above(table: np.ndarray, rng: np.random.Generator, generated: np.ndarray) -> np.ndarray:
    """Output lengths drawn uniformly from the sorted ``table`` of output lengths above
    what each request has ``generated`` (``generated + 1`` where none is above): the
    empirical law conditioned on a request in flight
    (:meth:`RequestLengths.output_given`)."""
    g = np.asarray(generated, np.int64)
    lo = np.searchsorted(table, g, side="right")
    out = g + 1
    have = lo < table.size
    if have.any():
        span = table.size - lo[have]
        pick = lo[have] + (rng.random(span.size) * span).astype(np.int64)
        out[have] = table[np.minimum(pick, table.size - 1)]
    return out


def _sorted_outputs(lengths: RequestLengths) -> np.ndarray:
    """The empirical table's output column, sorted (cached per file version)."""
    path = os.fspath(cast("str", lengths.path))
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    table = _SORTED_OUTPUTS.get(key)
    if table is None:
        table = np.sort(lengths._table()[1].astype(np.int64))
        _SORTED_OUTPUTS[key] = table
    return table
