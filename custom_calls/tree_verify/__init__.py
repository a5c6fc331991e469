"""Tree verify (the walk + bonus of a verified tree): dispatch between the XLA reference and the Pallas
kernel. The cache compaction that follows stays in XLA (a gather + dynamic_update_slice per layer, which
XLA fuses and runs in place on the donated cache)."""
import jax

from custom_calls.tree_verify.reference import tree_walk_reference

_IMPLS = ("auto", "xla", "pallas", "pallas_interpret")
# "auto" picks the kernel on GPUs: checked and timed on the H200 (benchmarks/RESULTS.md, tree kernels).
PALLAS_BY_DEFAULT = True


def tree_walk(tree_tokens, parents, valid, target_tokens, max_depth: int, *, impl: str = "auto"):
  """See reference.py. Returns (path [B, max_depth+1], n_accepted [B], bonus [B])."""
  if impl not in _IMPLS:
    raise ValueError(f"tree_walk: unknown impl {impl!r}; expected one of {_IMPLS}")
  if impl == "xla" or (impl == "auto" and not (PALLAS_BY_DEFAULT and jax.default_backend() == "gpu")):
    return tree_walk_reference(tree_tokens, parents, valid, target_tokens, max_depth)
  from custom_calls.tree_verify.pallas_triton import tree_walk_pallas
  return tree_walk_pallas(tree_tokens, parents, valid, target_tokens, max_depth=max_depth,
                          interpret=(impl == "pallas_interpret"))


__all__ = ["tree_walk", "tree_walk_reference"]
