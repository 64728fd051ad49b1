"""``ppo.yml`` as a module for rl-zoo3: ``--conf-file agents.hyperparams.ppo``."""

from . import read

#: env id -> hyperparameters, as in the shipped ``ppo.yml``
hyperparams = read("ppo")
