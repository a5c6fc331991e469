"""What the kernel tests compare with: the relative error of a kernel's output against its reference."""
import jax.numpy as jnp
import numpy as np


def rel_err(out, ref):
  """||out - ref|| / ||ref|| in float64 (out in any float dtype, bf16 included); out must be finite."""
  out = np.asarray(jnp.asarray(out, jnp.float32), np.float64)
  ref = np.asarray(ref, np.float64)
  assert np.all(np.isfinite(out)), "non-finite values in the kernel output"
  return np.linalg.norm(out - ref) / np.linalg.norm(ref)
