"""``a2c.yml`` as a module for rl-zoo3: ``--conf-file agents.hyperparams.a2c``."""

from . import read

#: env id -> hyperparameters, as in the shipped ``a2c.yml``
hyperparams = read("a2c")
