"""Seeding many NumPy generators at once, exactly as NumPy seeds one.

The vector env (``DynamicBatchingVectorEnv``) reseeds the arrival (and service)
generator of every lane that ends an episode, exactly as the scalar env does:
``PCG64(SeedSequence(seed, spawn_key=(k,)))``. NumPy's constructors cost about 10 µs per
generator, most of it Python-level set-up, and with random actions about 4 of 1024 lanes
reset in every step (more when their episodes end together). :func:`pcg64_states`
computes the same PCG64 states for all of them with one pass of integer array code:
SeedSequence's entropy mixing and ``generate_state``, then PCG64's seeding step. The
states go to each lane's existing generator (``bit_generator.state = ...``).

The constants and the order of operations are NumPy's (``numpy/random/bit_generator.pyx``
and ``numpy/random/src/pcg64``), which NumPy's reproducibility policy keeps fixed.
``tests/test_seeding.py`` checks the states against NumPy's constructors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

_M32 = 0xFFFFFFFF
_BATCH_SEEDING = 6  # lanes reset together from which the array seeding is used
_PCG_MULT = (2549297995355413924 << 64) | 4865540595714422341
_M128 = (1 << 128) - 1


def _hash_consts(init: int, mult: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The (xor, multiply) constants of ``n`` successive hashmix calls."""
    xor, mul, h = [], [], init
    for _ in range(n):
        xor.append(h)
        h = (h * mult) & _M32
        mul.append(h)
    return np.array(xor, dtype=np.uint32)[:, None], np.array(mul, dtype=np.uint32)[:, None]


_HA_X, _HA_M = _hash_consts(0x43B0D7E5, 0x931E8875, 4 + 12 + 4)  # mix_entropy's hashmix calls
_HB_X, _HB_M = _hash_consts(0x8B51F9DD, 0x58F38DED, 8)  # generate_state(4, uint64)
_MIX_L, _MIX_R = np.uint32(0xCA01F9DD), np.uint32(0x4973F715)
_S16 = np.uint32(16)


def _hashmix(v: np.ndarray, k: slice) -> np.ndarray:
    v = (v ^ _HA_X[k]) * _HA_M[k]
    return v ^ (v >> _S16)


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    r = _MIX_L * x - _MIX_R * y
    return r ^ (r >> _S16)


def pcg64_states(seeds: list[int], spawn: int) -> list[Mapping[str, Any]]:
    """``PCG64(SeedSequence(seed, spawn_key=(spawn,))).state`` for every seed, at once.

    NumPy's SeedSequence (entropy mixing, then ``generate_state(4, uint64)``) and PCG64's
    seeding, as integer array code over all seeds: the vector env seeds every lane reset
    in a step with one pass of about 40 array operations instead of one set of
    constructors per lane (10 µs each); it pays from about 6 seeds, so fewer take NumPy's
    constructors, as do seeds outside ``[0, 2**64)`` (more entropy words). ``tests/test_vector_env.py`` checks the states against
    NumPy's.
    """
    if len(seeds) < _BATCH_SEEDING:  # below this, NumPy's constructors cost less
        return [
            np.random.PCG64(np.random.SeedSequence(sd, spawn_key=(spawn,))).state for sd in seeds
        ]
    fast = [0 <= sd < 1 << 64 for sd in seeds]
    s = np.asarray([sd if ok else 0 for sd, ok in zip(seeds, fast, strict=True)], dtype=np.uint64)
    ent = np.zeros((4, s.size), dtype=np.uint32)  # low word, high word, zero padding
    ent[0] = s & np.uint64(_M32)
    ent[1] = s >> np.uint64(32)
    mixer = _hashmix(ent, slice(0, 4))
    k = 4
    for src in range(4):
        dst = [d for d in range(4) if d != src]
        mixer[dst] = _mix(mixer[dst], _hashmix(mixer[src][None, :], slice(k, k + 3)))
        k += 3
    mixer = _mix(mixer, _hashmix(np.full((1, 1), spawn, dtype=np.uint32), slice(k, k + 4)))
    words = (mixer[[0, 1, 2, 3, 0, 1, 2, 3]] ^ _HB_X) * _HB_M
    words ^= words >> _S16
    w = words.astype(np.uint64)
    w64 = (w[0::2] | (w[1::2] << np.uint64(32))).T.tolist()  # little-endian pairs
    out: list[Mapping[str, Any]] = []
    for (a, b, c, d), sd, ok in zip(w64, seeds, fast, strict=True):
        if not ok:
            out.append(np.random.PCG64(np.random.SeedSequence(sd, spawn_key=(spawn,))).state)
            continue
        inc = (((c << 64) | d) << 1 | 1) & _M128
        state = (((inc + ((a << 64) | b)) & _M128) * _PCG_MULT + inc) & _M128
        out.append(
            {
                "bit_generator": "PCG64",
                "state": {"state": state, "inc": inc},
                "has_uint32": 0,
                "uinteger": 0,
            }
        )
    return out
