"""The LLM profile loader under its first name: ``batch_env.llm_profile`` is
:mod:`batch_env.profiles.llm_profile` (the same module object, so
``batch_env.llm_profile.load`` and monkeypatching it keep working)."""

import sys

from .profiles import llm_profile as _llm_profile

sys.modules[__name__] = _llm_profile
