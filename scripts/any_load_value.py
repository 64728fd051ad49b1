"""What knowing the load is worth when it is drawn per episode (the any-load task).

For loads spread evenly over [0.1, 0.95] of the max throughput (ResNet-50/V100, B = 32,
queue capacity 500), the average over the loads of the exact long-run cost per second
of: the SMDP optimum at each load (an oracle that knows the load), the SMDP policy
solved once for the middle load (0.525), and greedy, for three cost settings.

    python scripts/any_load_value.py
"""

import numpy as np

from baselines.smdp import SMDPProblem, policy_gain, solve
from batch_env.profiles.batch_profile import load

prof = load("resnet50-v100")
B = 32
lat, en = prof.tables(B)
mu = B / lat[B]
for we, idle in ((0.5, 55.0), (2.0, 55.0), (0.5, 0.0)):
    loads = np.linspace(0.1, 0.95, 18)
    common = dict(
        latency_s=tuple(lat), energy_j=tuple(en), idle_power_w=idle, w_energy=we, queue_capacity=500
    )
    mid = solve(SMDPProblem(rate_per_s=0.525 * mu, **common)).policy
    o = g = m = 0.0
    for L in loads:
        pb = SMDPProblem(rate_per_s=L * mu, **common)
        o += solve(pb).gain
        g += policy_gain(pb, np.minimum(np.arange(501), B))
        m += policy_gain(pb, mid)
    n = len(loads)
    print(
        f"w_e {we} idle {idle}: oracle {o / n:.2f} smdp@mid {m / n:.2f} (+{100 * (m / o - 1):.1f}%) greedy {g / n:.2f} (+{100 * (g / o - 1):.1f}%)"
    )
