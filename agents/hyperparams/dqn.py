"""``dqn.yml`` as a module for rl-zoo3: ``--conf-file agents.hyperparams.dqn``."""

from . import read

#: env id -> hyperparameters, as in the shipped ``dqn.yml``
hyperparams = read("dqn")
