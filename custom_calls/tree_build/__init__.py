"""DDTree best-first construction: dispatch between the XLA reference and the Pallas kernel."""
import jax

from custom_calls.tree_build.reference import ancestors_from_parents, tree_build_reference

_IMPLS = ("auto", "xla", "pallas", "pallas_interpret")
# Above this many register slots per vector the one-program kernel would spill; use XLA instead.
MAX_PALLAS_BUDGET = 1024
# "auto" picks the kernel on GPUs: checked and timed on the H200 (benchmarks/RESULTS.md, tree kernels).
PALLAS_BY_DEFAULT = True


def tree_build(topk_logprobs, topk_tokens, budget: int, *, impl: str = "auto"):
  """topk_logprobs/topk_tokens: [B, L, K] -> (tokens, parents, depths, scores, ranks, valid) [B, N+1]."""
  if impl not in _IMPLS:
    raise ValueError(f"tree_build: unknown impl {impl!r}; expected one of {_IMPLS}")
  if impl == "xla" or (impl == "auto" and not (PALLAS_BY_DEFAULT and jax.default_backend() == "gpu"
                                                 and budget <= MAX_PALLAS_BUDGET)):
    return tree_build_reference(topk_logprobs, topk_tokens, budget)
  from custom_calls.tree_build.pallas_triton import tree_build_pallas
  return tree_build_pallas(topk_logprobs, topk_tokens, budget=budget, interpret=(impl == "pallas_interpret"))


__all__ = ["tree_build", "tree_build_reference", "ancestors_from_parents"]
