"""The dataset registry under its first name: ``batch_env.data`` is
:mod:`batch_env.workload.datasets` (the same module object, so ``batch_env.data.fetch``,
``batch_env.data.DATASETS`` and monkeypatching it keep working)."""

import sys

from .workload import datasets as _datasets

sys.modules[__name__] = _datasets
