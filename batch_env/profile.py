"""The batch profile loader under its first name: ``batch_env.profile`` is
:mod:`batch_env.profiles.batch_profile` (the same module object, so
``batch_env.profile.load`` and monkeypatching it keep working)."""

import sys

from .profiles import batch_profile as _batch_profile

sys.modules[__name__] = _batch_profile
