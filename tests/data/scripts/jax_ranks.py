"""Two JAX processes under stepwatch's launcher: jax.distributed is initialised before this runs, so each process
sees the other's device, and a computation over both runs."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

import stepwatch

assert jax.process_count() == 2 and jax.device_count() == 2, (jax.process_count(), jax.device_count())
ranks = multihost_utils.process_allgather(np.array([jax.process_index()]))  # a collective across the processes
assert sorted(ranks.ravel().tolist()) == [0, 1], ranks
for _ in stepwatch.steps(range(1000), examples_per_step=4):
    x = jnp.ones(4).sum()
