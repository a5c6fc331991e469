"""Every GPU kernel lowers to a valid Triton module for an H200, checked on the CPU.

The interpreter tests (test_kernels_*.py) check what a kernel computes, not whether the Pallas -> Triton
lowering accepts it: a kernel can pass them and still fail on the GPU at compile time (for example an
scf.for whose bounds have different integer types). Here each kernel is lowered for the CUDA platform
with an abstract NVIDIA H200 (no GPU needed) and the MLIR verifier runs on every Triton module.
PTX generation itself still needs the GPU (the `gpu`-marked tests).
"""
import jax
import jax.numpy as jnp
import pytest

from custom_calls.mla_attention.pallas_triton import mla_attention_pallas
from custom_calls.mla_attention.split_combine import combine_splits_pallas
from custom_calls.moe_int4.pallas_gemv import routed_experts_int4_gemv
from custom_calls.moe_int4.pallas_gemv_pipelined import routed_experts_int4_gemv_pipelined
from custom_calls.moe_int4.pallas_triton import routed_experts_int4_pallas
from custom_calls.moe_int4.pallas_triton_pipelined import routed_experts_int4_grouped_one_launch
from custom_calls.tree_build.pallas_triton import tree_build_pallas
from custom_calls.tree_verify.pallas_triton import tree_walk_pallas
from tests.kernel_checks import lowered_for_h200, triton_modules_for_h200

S = jax.ShapeDtypeStruct


def lower_for_h200(fn, *abstract_args):
  """The number of Triton modules fn's kernels lower to for an H200, each verified (kernel_checks)."""
  return len(triton_modules_for_h200(fn, *abstract_args))


def moe_args(n, e=8, d=1024, inter=512, dtype=jnp.bfloat16):
  return (S((n, d), dtype), S((n, 8), jnp.int32), S((n, 8), jnp.float32),
          S((e, inter, d // 8), jnp.int32), S((e, inter, d // 32), jnp.bfloat16),
          S((e, inter, d // 8), jnp.int32), S((e, inter, d // 32), jnp.bfloat16),
          S((e, d, inter // 8), jnp.int32), S((e, d, inter // 32), jnp.bfloat16))


MOE_KERNELS = {
    "gemv_token_order": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, sort_pairs=False),
    "gemv_sorted": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, sort_pairs=True),
    "gemv_sorted_runs": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, sort_pairs=True, rows_per_run=4),
    "gemv_pair_splits": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=4),
    "gemv_prefetch": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, prefetch=2),
    "gemv_unrolled_token_order": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=1,
                                                                     unroll_pairs=True),
    "gemv_looped_token_order": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=1,
                                                                   unroll_pairs=False),
    "gemv_unrolled_pair_splits": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=4,
                                                                     unroll_pairs=True),
    "gemv_looped_pair_splits": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=4,
                                                                   unroll_pairs=False),
    "gemv_rank_in_kernel": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=4,
                                                               rank_in_kernel=True),
    "gemv_uncompacted_pair_splits": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=32,
                                                                        compact_pairs=False),
    "gemv_down_options": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, block_k_down=128,
                                                             num_warps_down=8),
    # both parts in one launch (one module)
    "gemv_pipelined": lambda *a: routed_experts_int4_gemv_pipelined(*a, 0, block_k=512),
    "gemv_pipelined_lag1_ticket": lambda *a: routed_experts_int4_gemv_pipelined(*a, 0, block_k=512, lag=1,
                                                                                ticket=True),
    # the down tile as one 8-row tile (the default at these token counts is two of 4 rows), both down kernels
    "gemv_one_down_tile": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, down_row_splits=1),
    "gemv_sorted_one_down_tile": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, sort_pairs=True,
                                                                     down_row_splits=1),
    "grouped": lambda *a: routed_experts_int4_pallas(*a, 0),
    "grouped_planar": lambda *a: routed_experts_int4_pallas(*a, 0, planar=True, block_k=256),
    "grouped_f32_planes": lambda *a: routed_experts_int4_pallas(*a, 0, planar=True, block_k=256, exact_bf16=False),
    # the grouped kernels' two parts in one launch (one module)
    "grouped_one_launch": lambda *a: routed_experts_int4_grouped_one_launch(*a, 0),
}


@pytest.mark.parametrize("kernel", sorted(MOE_KERNELS))
def test_moe_kernels_lower_for_h200(kernel):
  one_launch = kernel.startswith("gemv_pipelined") or kernel == "grouped_one_launch"
  modules = 1 if one_launch else 2                                          # gate/up and down, or both in one
  assert lower_for_h200(MOE_KERNELS[kernel], *moe_args(4)) == modules


def test_moe_grouped_one_launch_lowers_at_its_dispatched_token_counts():
  """One module at 7 tokens (32-wide tiles on the stored layout) and at 64 (128-wide tiles, more row blocks)."""
  fn = lambda *a: routed_experts_int4_grouped_one_launch(*a, 0)
  assert lower_for_h200(fn, *moe_args(7)) == 1 and lower_for_h200(fn, *moe_args(64)) == 1


@pytest.mark.parametrize("kernel", ["gemv_pipelined", "grouped_one_launch"])
def test_one_launch_wait_with_sleep_polls_volatile_loads_after_a_nanosleep(kernel):
  """wait_sleep_ns > 0 (grid_sync.counter_wait): the waiting loop is kept (its result is used), each poll is a
  nanosleep then a volatile load, and one acquiring atomic follows; 0 keeps the atomic polls and no sleep."""
  run = {"gemv_pipelined": lambda *a, **kw: routed_experts_int4_gemv_pipelined(*a, 0, block_k=512, **kw),
         "grouped_one_launch": lambda *a, **kw: routed_experts_int4_grouped_one_launch(*a, 0, **kw)}[kernel]

  def lowered(**kw):
    [module] = triton_modules_for_h200(lambda *a: run(*a, **kw), *moe_args(4))
    return module
  slept, atomic_polls = lowered(wait_sleep_ns=300), lowered()
  assert "nanosleep.u32 300;" in slept and "scf.while" in slept
  assert "tt.load" in slept.split("scf.while", 1)[1] and "isVolatile = true" in slept
  assert "nanosleep" not in atomic_polls and "scf.while" in atomic_polls and "isVolatile = true" not in atomic_polls


def test_gemv_pipelined_wait_flags_are_set_by_an_integer_exchange():
  """wait_flags (grid_sync.arrive_and_broadcast): one verified module, in which the last gate/up program's flags are
  one integer exchange on a vector of i32 pointers (an add there would be lowered as a float add: kernel_checks),
  and the down programs still poll in a loop."""
  fn = lambda *a: routed_experts_int4_gemv_pipelined(*a, 0, block_k=512, wait_flags=16)
  [module] = triton_modules_for_h200(fn, *moe_args(4))
  assert any("atomic_rmw exch" in line and "tensor<16x!tt.ptr<i32>>" in line for line in module.splitlines())
  assert "scf.while" in module


@pytest.mark.parametrize("poll,sleep_ns", [("volatile", 0), ("volatile", 100), ("atomic", 0)])
def test_grid_sync_wait_lowers_each_way_to_poll(poll, sleep_ns):
  """grid_sync.counter_wait in a one-program kernel: volatile polls (with or without a nanosleep between them) then
  one acquiring atomic, or atomic polls; the loop survives in every case (its result decides the output)."""
  from jax.experimental import pallas as pl
  from custom_calls.moe_int4 import grid_sync

  def kernel(sync_ref, out_ref):
    ok = grid_sync.counter_wait(sync_ref, pl.program_id(0), 3, interpret=False, poll=poll, sleep_ns=sleep_ns)
    out_ref[...] = jnp.full((16,), grid_sync.poison_unless(ok))

  fn = lambda sync: pl.pallas_call(kernel, grid=(1,), out_shape=S((16,), jnp.float32))(sync)
  [module] = triton_modules_for_h200(fn, S((4,), jnp.int32))
  loop = module.split("scf.while", 1)[1]
  assert ("isVolatile = true" in loop) == (poll == "volatile")
  assert ("nanosleep" in module) == (sleep_ns > 0)
  assert "tt.atomic_rmw" in (loop if poll == "atomic" else module)


def test_grid_sync_wait_rejects_a_sleep_between_atomic_polls():
  from custom_calls.moe_int4 import grid_sync
  for poll, sleep_ns in (("atomic", 100), ("spin", 0)):
    with pytest.raises(ValueError, match=f"counter_wait: poll {poll!r} with sleep_ns {sleep_ns}: expected one of"):
      grid_sync.counter_wait(None, 0, 1, interpret=True, poll=poll, sleep_ns=sleep_ns)


def test_moe_gemv_down_kernel_options_reach_its_launch():
  """block_k_down sets the down kernel's word tiles ([4, 64] words at K steps of 512, [4, 16] at 128: its 8 rows as
  two 4-row tiles, default_down_row_splits) and num_warps_down its launch; the gate/up kernel keeps block_k and
  num_warps. down_row_splits 1 gives one [8, 64] tile."""
  import re

  def lowered(**kw):
    low, modules = lowered_for_h200(lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, **kw), *moe_args(1))
    return modules, re.findall(r"num_warps = (\d+)", low.as_text())
  (gate_up, down), warps = lowered()
  assert "tensor<4x64xi32>" in down and "tensor<8x64xi32>" not in down and warps == ["4", "4"]
  (gate_up_k, down_k), warps_k = lowered(block_k_down=128, num_warps_down=8)
  assert "tensor<4x64xi32>" not in down_k and "tensor<4x16xi32>" in down_k and gate_up_k == gate_up
  assert warps_k == ["4", "8"]
  (gate_up_1, down_1), _ = lowered(down_row_splits=1)
  assert "tensor<8x64xi32>" in down_1 and "tensor<4x64xi32>" not in down_1 and gate_up_1 == gate_up


@pytest.mark.parametrize("n", [1, 4])
def test_moe_gemv_kernels_take_the_planes_and_constants_as_one_array(n):
  """The dispatch at 1 token (two launches) and 4 tokens (one launch, counters in place) with a traced expert offset:
  the first operand of every Triton call is the one int32 [N + 1, D] concatenation of planes_consts.py (planes, then
  the constant words), so that XLA makes one kernel before them, not a second array of constants (round 34)."""
  import re
  from custom_calls import moe_int4
  low, _ = lowered_for_h200(lambda off, *a: moe_int4.routed_experts_int4(*a, expert_offset=off, impl="pallas"),
                            S((), jnp.int32), *moe_args(n))
  text = low.as_text()
  calls = re.findall(r"stablehlo\.custom_call @__gpu\$xla\.gpu\.triton\((%[\w#]+)", text)
  assert len(calls) == (2 if n < 4 else 1), calls
  for operand in calls:
    [definition] = [line for line in text.splitlines() if line.strip().startswith(f"{operand} = ")]
    assert "stablehlo.concatenate" in definition and f"tensor<{n + 1}x1024xi32>" in definition, definition
  assert len(set(calls)) == 1                                # both launches read the same array


def test_moe_gemv_pipelined_loads_no_step_ahead_at_one_token_by_default():
  """ONE_LAUNCH_PREFETCH: at 1 token the one-launch kernel is the prefetch 0 kernel (pallas_gemv's two
  launches prefetch 1 there), not the prefetch 1 one."""
  run = lambda **kw: triton_modules_for_h200(lambda *a: routed_experts_int4_gemv_pipelined(*a, 0, block_k=512, **kw),
                                             *moe_args(1))
  default, no_prefetch, prefetch = run(), run(prefetch=0), run(prefetch=1)
  assert default == no_prefetch and default != prefetch


def test_moe_gemv_rank_in_kernel_lowers_for_pair_counts_not_powers_of_two():
  fn = lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, pair_splits=3, rank_in_kernel=True)
  assert lower_for_h200(fn, *moe_args(3)) == 2                          # 24 pairs, ranked over 32


def k_chunked_moe_args(n, chunk, e=8, d=1024, inter=512, dtype=jnp.bfloat16):
  """moe_args with the expert arrays k-chunked (custom_calls/moe_int4/k_chunks.py)."""
  return (S((n, d), dtype), S((n, 8), jnp.int32), S((n, 8), jnp.float32),
          S((e, d // chunk, inter, chunk // 8), jnp.int32), S((e, d // chunk, inter, chunk // 32), jnp.bfloat16),
          S((e, d // chunk, inter, chunk // 8), jnp.int32), S((e, d // chunk, inter, chunk // 32), jnp.bfloat16),
          S((e, inter // chunk, d, chunk // 8), jnp.int32), S((e, inter // chunk, d, chunk // 32), jnp.bfloat16))


@pytest.mark.parametrize("kernel,block_k", [("grouped_planar", 256), ("grouped_planar", 128),
                                            ("gemv_token_order", 256), ("gemv_pair_splits", 128),
                                            ("gemv_token_order", 1024), ("gemv_pair_splits", 512)])
def test_moe_kernels_on_k_chunks_lower_for_h200(kernel, block_k):
  fn = {"grouped_planar": lambda *a: routed_experts_int4_pallas(*a, 0, planar=True, block_k=block_k),
        "gemv_token_order": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=block_k, sort_pairs=False),
        "gemv_pair_splits": lambda *a: routed_experts_int4_gemv(*a, 0, block_k=block_k, pair_splits=4)}[kernel]
  # I = 1024 so that the gemv's K step of 1024 inputs is not clipped to I: 4 chunks per step
  assert lower_for_h200(fn, *k_chunked_moe_args(4, 256, d=1024, inter=1024)) == 2


@pytest.mark.parametrize("b,t,h,s,num_splits,modules", [(1, 1, 8, 4096, None, 2), (1, 17, 8, 1024, 1, 1),
                                                        (2, 16, 64, 512, None, 2),
                                                        (1, 1, 8, 1024, None, 2)])   # 16-key blocks (default_block_k)
def test_mla_kernel_lowers_for_h200(b, t, h, s, num_splits, modules):
  args = (S((b, t, h, 512), jnp.bfloat16), S((b, t, h, 64), jnp.bfloat16), S((b, s, 512), jnp.bfloat16),
          S((b, s, 64), jnp.bfloat16), S((b,), jnp.int32), S((b, t, t), jnp.bool_))
  fn = lambda *a: mla_attention_pallas(*a, scale=0.1, num_splits=num_splits)
  assert lower_for_h200(fn, *args) == modules              # the attention kernel, and the combine for > 1 split


def test_mla_kernel_reads_the_bool_tree_mask_itself():
  """The tree mask goes to the kernel as bool, with no XLA convert before the launch (round 32 traced one, 1.1-1.3 us
  of a batch-1 decode call): the kernel's pointer to it is i1, cast to i8 for the load (as Triton does for bools)."""
  args = (S((1, 4, 8, 512), jnp.bfloat16), S((1, 4, 8, 64), jnp.bfloat16), S((1, 1024, 512), jnp.bfloat16),
          S((1, 1024, 64), jnp.bfloat16), S((1,), jnp.int32), S((1, 4, 4), jnp.bool_))
  fn = lambda *a: mla_attention_pallas(*a, scale=0.1, num_splits=1)
  low, [module] = lowered_for_h200(fn, *args)
  assert "!tt.ptr<i1>" in module and "!tt.ptr<i1>> -> tensor<32x64x!tt.ptr<i8>>" in module
  hlo = low.as_text()
  assert not [line for line in hlo.splitlines() if "stablehlo.convert" in line and "xi1>" in line]


@pytest.mark.parametrize("ns,m,num_rows", [(128, 64, 64), (33, 8, 8), (3, 2112, 2056)])
def test_mla_split_combine_lowers_for_h200(ns, m, num_rows):
  fn = lambda o, l: combine_splits_pallas(o, l, out_dtype=jnp.bfloat16, num_rows=num_rows)
  assert lower_for_h200(fn, S((1, ns, m, 512), jnp.bfloat16), S((1, ns, m), jnp.float32)) == 1


def test_tree_kernels_lower_for_h200():
  build = lambda lp, tok: tree_build_pallas(lp, tok, budget=32)
  assert lower_for_h200(build, S((2, 8, 4), jnp.float32), S((2, 8, 4), jnp.int32)) == 1
  walk = lambda *a: tree_walk_pallas(*a, max_depth=8)
  assert lower_for_h200(walk, S((2, 33), jnp.int32), S((2, 33), jnp.int32), S((2, 33), jnp.bool_),
                        S((2, 33), jnp.int32)) == 1


def test_arrive_and_broadcast_needs_a_power_of_two_of_flags():
  """The flags are one Triton vector: a count Triton cannot build is refused by name before lowering."""
  from custom_calls.moe_int4 import grid_sync
  for bad in (0, 3, 48, 512, True, 2.0):
    with pytest.raises(ValueError, match=f"arrive_and_broadcast: {bad!r} flags: expected a power of two"):
      grid_sync.arrive_and_broadcast(None, 1, 4, 32, bad, interpret=True)


def _first_lines_until_load(module):
  """The module's lines up to its first tt.load (what a kernel does before it reads anything)."""
  return module.split("tt.load", 1)[0]


def test_mosaic_mla_trigger_dependents_issues_launch_dependents():
  """The Mosaic GPU MLA kernel with trigger_dependents: its module carries griddepcontrol.launch_dependents and no
  griddepcontrol.wait (the trigger does not make it a PDL launch: plgpu's wait would), and without it neither."""
  from custom_calls.gpu_lowering import lower_for_abstract_gpu
  from custom_calls.mla_attention.mosaic_gpu import mla_attention_mosaic
  args = (S((1, 1, 64, 512), jnp.bfloat16), S((1, 1, 64, 64), jnp.bfloat16), S((1, 4096, 512), jnp.bfloat16),
          S((1, 4096, 64), jnp.bfloat16), S((1,), jnp.int32), S((1, 1, 1), jnp.bool_))

  def module_text(**kw):
    texts = []
    lower_for_abstract_gpu(lambda *a: mla_attention_mosaic(*a, scale=0.1, **kw), *args,
                           on_mosaic_module=lambda m: texts.append(str(m)))
    [text] = texts
    return text
  triggered, plain = module_text(trigger_dependents=True), module_text()
  assert "griddepcontrol.launch_dependents" in triggered and "griddepcontrol.wait" not in triggered
  assert "griddepcontrol" not in plain


@pytest.mark.parametrize("kernel", ["mla", "moe_gemv"])
def test_trigger_dependents_issues_launch_dependents_before_every_load(kernel):
  """trigger_dependents (custom_calls/dependent_launch.py): the kernel that precedes another (the MLA attention
  kernel before its split combine, the gemv's gate/up kernel before its down kernel) carries one
  `griddepcontrol.launch_dependents`, ahead of its first load; off, no module has it, and the following kernel
  never does."""
  if kernel == "mla":
    args = (S((1, 1, 8, 512), jnp.bfloat16), S((1, 1, 8, 64), jnp.bfloat16), S((1, 4096, 512), jnp.bfloat16),
            S((1, 4096, 64), jnp.bfloat16), S((1,), jnp.int32), S((1, 1, 1), jnp.bool_))
    run = lambda **kw: (lambda *a: mla_attention_pallas(*a, scale=0.1, num_splits=8, **kw))
  else:
    args = moe_args(1)
    run = lambda **kw: (lambda *a: routed_experts_int4_gemv(*a, 0, block_k=512, **kw))
  first, second = triton_modules_for_h200(run(trigger_dependents=True), *args)
  assert first.count("griddepcontrol.launch_dependents") == 1
  assert "griddepcontrol.launch_dependents" in _first_lines_until_load(first)
  assert "griddepcontrol" not in second
  assert not any("griddepcontrol" in m for m in triton_modules_for_h200(run(), *args))
