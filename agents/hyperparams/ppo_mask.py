"""``ppo_mask.yml`` as a module for rl-zoo3: ``--conf-file agents.hyperparams.ppo_mask``."""

from . import read

#: env id -> hyperparameters, as in the shipped ``ppo_mask.yml``
hyperparams = read("ppo_mask")
