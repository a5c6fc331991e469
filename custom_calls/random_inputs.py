"""Random inputs shared by the kernel tests and the kernel benchmarks (never zeros)."""
import jax
import jax.numpy as jnp
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


def random_int4_experts(keys, e, d, inter, group_size=32):
  """INT4 experts in the stored compressed-tensors layout, made on the device (quick at K2.6 sizes): random int32
  words (every nibble is a valid INT4 value) and bf16 scales in [0.005, 0.015). keys: 6 PRNG keys, one per array.
  Returns (gate_packed [E, I, D/8], gate_scale [E, I, D/g], up_packed, up_scale, down_packed [E, D, I/8],
  down_scale [E, D, I/g])."""
  words = lambda k, shape: jax.random.bits(k, shape, jnp.uint32).view(jnp.int32)
  scales = lambda k, shape: (jax.random.uniform(k, shape, jnp.float32, 0.5, 1.5) * 0.01).astype(jnp.bfloat16)
  return (words(keys[0], (e, inter, d // 8)), scales(keys[1], (e, inter, d // group_size)),
          words(keys[2], (e, inter, d // 8)), scales(keys[3], (e, inter, d // group_size)),
          words(keys[4], (e, d, inter // 8)), scales(keys[5], (e, d, inter // group_size)))
