"""Random inputs shared by the kernel tests and the kernel benchmarks (never zeros)."""
import numpy as np


def ancestor_masks(rng, b, t):
  """Random trees in topological order (parent index < child index): [B, T, T] ancestor-or-self."""
  m = np.zeros((b, t, t), bool)
  for bb in range(b):
    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, t)]
    for i in range(t):
      j = i
      while j >= 0:
        m[bb, i, j] = True
        j = parent[j]
  return m
