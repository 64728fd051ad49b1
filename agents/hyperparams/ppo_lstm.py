"""``ppo_lstm.yml`` as a module for rl-zoo3: ``--conf-file agents.hyperparams.ppo_lstm``."""

from . import read

#: env id -> hyperparameters, as in the shipped ``ppo_lstm.yml``
hyperparams = read("ppo_lstm")
