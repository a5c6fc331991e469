"""Ordering between the programs of ONE grid through counters in global memory (the one-launch MoE kernels).

A program that produces part of an intermediate `arrive`s on a counter when its stores are done; a program that
consumes it `counter_wait`s until every producer has arrived. The consumer must come after all its producers in
the grid (or take its place from a ticket): CUDA starts a grid's programs in index order in practice, so the
producers have started and, waiting on nothing, finish. A wait that gives up after SPIN_LIMIT polls returns False,
and the caller poisons its output with NaN, so that a broken schedule fails a check instead of hanging the GPU.

The counters are int32 words of a small array that XLA makes fresh for each call, so no zero-fill runs: a fusion
when the array holds a traced value (pallas_gemv_pipelined's expert offset), otherwise a constant, which the kernel
updates in place as an aliased output (XLA's copy insertion gives each call its own copy; the GPU tests call each
kernel twice in one program to check it). The counters are never reset: a reused array would let every wait pass at
once, so nothing may hand the kernels one.
Interpreted (the CPU tests) programs run one after another in grid order: every wait is already met.

How counter_wait polls (its poll and sleep_ns; the sm_90 SASS of both loops is in
benchmarks/results/issue6_r30/wait_sass.txt):
- "atomic" (the default, and the kernels'): back-to-back acquire-release atomic adds of 0. Each is two CTA barriers,
  MEMBAR.ALL.GPU, ATOMG, then CCTL.IVALL, which invalidates the whole L1 of the waiting program's SM, where gate/up
  programs may be running.
- "volatile": volatile loads (LDG.E.STRONG.SYS: no fence, no L1 invalidation), with a nanosleep of sleep_ns between
  them when sleep_ns > 0; once the count is seen, one acquire-release atomic, so that the loads after the wait see
  the producers' stores.
  - With a 200-ns sleep it measured SLOWER (H100, benchmarks/RESULTS.md, issue 6 thirtieth round). A read-only
    launch whose down programs wait took 30.0 us at 1 token against 21.6 with atomic polls (61.2 against 43.7 at 2
    tokens). The grouped one-launch kernel tied at 8 and 16 tokens. The kernels' wait_sleep_ns option keeps it.
  - Without the sleep it measured slower still (round 31, speed_of_light.py's read_1_volatile): 31.1 us at 1 token
    against 23.0 with atomic polls (58.0 against 44.1 at 2 tokens).
"""
import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

SPIN_LIMIT = 1 << 20        # polls of a counter before a waiting program gives up (~1 us each)


def arrive(sync_ref, index, *, interpret):
  """This program's stores are done: a CTA barrier (every thread's stores), then one acquire-release add of 1 to
  word `index` of sync_ref at GPU scope."""
  if not interpret:              # (the interpreter has no barrier; its programs run one after another)
    plgpu.debug_barrier()
  plgpu.atomic_add(sync_ref, index, jnp.int32(1))


FLAG_STRIDE = 32            # int32 words from one flag to the next (arrive_and_broadcast): one 128-byte line each


def flag_index(flag_base, k):
  """The word of flag k (arrive_and_broadcast)."""
  return flag_base + k * FLAG_STRIDE


def arrive_and_broadcast(sync_ref, index, total, flag_base, num_flags, *, interpret, index_of=None):
  """arrive() on word `index`; the program whose add brings it to `total` (the last producer) then sets
  num_flags flags (words flag_index(flag_base, k), each on its own 128-byte line) to 1, so that consumers poll one
  flag each (counter_wait(sync_ref, flag_index(flag_base, k), 1)) instead of all polling the word every producer
  adds to. (Round 32's question: whether 896 programs polling that one word is what the in-kernel wait costs.)

  Ordering: every producer's stores, then its release add; the last one's add acquires them all; a CTA barrier
  (its threads after that acquire), then one acquire-release exchange per flag (sets it to 1), all num_flags in one
  vector exchange over the CTA's threads. Not an add: Pallas (jax 0.11.2) lowers an atomic add of an int32 VECTOR
  as a float add (its rule tests the tensor type for an integer type), which on the GPU flushes the int's bits (a
  denormal) to 0: round 32's first GPU run of this never set a flag. The interpreter has no exchange (its discharge
  rule), so interpreted programs add 1 instead (the same flags, the same waits).
  sync_ref needs flag_index(flag_base, num_flags - 1) + 1 words; num_flags a power of two (Triton's tensor sizes).
  index_of: word -> sync_ref's index of that word (an int32 vector of words in, a tuple of index vectors out) where
  sync_ref is not a vector of words (pallas_gemv_pipelined's [rows, D] array); `index` is then such an index too."""
  check_num_flags("arrive_and_broadcast", num_flags)
  if not interpret:
    plgpu.debug_barrier()
  old = plgpu.atomic_add(sync_ref, index, jnp.int32(1))

  @pl.when(old == total - 1)
  def _():
    if not interpret:
      plgpu.debug_barrier()
    words = flag_index(flag_base, jnp.arange(num_flags, dtype=jnp.int32))
    flags = tuple(index_of(words)) if index_of else (words,)
    set_flags = plgpu.atomic_add if interpret else plgpu.atomic_xchg
    set_flags(sync_ref, flags, jnp.ones((num_flags,), jnp.int32))


def valid_num_flags(num_flags):
  """Whether arrive_and_broadcast takes this many flags: an int, a power of two (its flags are one Triton vector) in
  [1, 256]."""
  return (isinstance(num_flags, int) and not isinstance(num_flags, bool) and 1 <= num_flags <= 256
          and num_flags & (num_flags - 1) == 0)


def check_num_flags(where, num_flags):
  """arrive_and_broadcast's flag count (valid_num_flags), or a ValueError naming `where`."""
  if not valid_num_flags(num_flags):
    raise ValueError(f"{where}: {num_flags!r} flags: expected a power of two in [1, 256] (the flags are set as one "
                     "Triton vector, whose size must be a power of two)")


POLLS = ("atomic", "volatile")


def counter_wait(sync_ref, index, target, *, interpret, poll=None, sleep_ns=0, spin_limit=SPIN_LIMIT):
  """Poll word `index` of sync_ref (an index of a vector, or a tuple indexing an array) until it reaches target;
  True when it did (False: spin_limit polls gave up).

  poll "atomic" (the default when sleep_ns is 0): each poll is an acquire-release atomic add of 0, back to back.
  poll "volatile" (the default when sleep_ns > 0): each poll is a plain volatile load, after a `nanosleep` of about
  sleep_ns when sleep_ns > 0, and one acquiring atomic once the count is seen (so that the loads after the wait see
  the producers' stores). The module docstring has what each costs."""
  poll = poll or ("volatile" if sleep_ns else "atomic")
  if poll not in POLLS or (poll == "atomic" and sleep_ns):
    raise ValueError(f"counter_wait: poll {poll!r} with sleep_ns {sleep_ns!r}: expected one of {POLLS}, and a sleep "
                     "only between volatile polls")
  read = lambda: plgpu.atomic_add(sync_ref, index, jnp.int32(0))
  if interpret:                 # programs run in grid order: every arrival is in (a polling loop cannot be discharged)
    return read() >= target
  if poll == "atomic":
    seen, _ = lax.while_loop(lambda s: (s[0] < target) & (s[1] < spin_limit), lambda s: (read(), s[1] + 1),
                             (read(), jnp.int32(0)))
    return seen >= target

  def volatile_poll(s):
    _, polls = s
    at = index
    if sleep_ns:
      # the load's index depends on the sleep's result (0 added, which the compiler cannot see), so that the load
      # is not issued before the sleep; and the sleep on the loop's count, so that it is not hoisted out of the loop
      zero = _sleep_then(sleep_ns, polls) - polls
      at = (*index[:-1], index[-1] + zero) if isinstance(index, tuple) else index + zero
    return plgpu.load(sync_ref.at[at], volatile=True), polls + 1

  seen, _ = lax.while_loop(lambda s: (s[0] < target) & (s[1] < spin_limit), volatile_poll,
                           (plgpu.load(sync_ref.at[index], volatile=True), jnp.int32(0)))
  # the acquiring read after the loop (its result is also used, so that the loop is not dropped as dead code)
  return (seen >= target) & (read() >= target)


def _sleep_then(ns, value):
  """`nanosleep.u32 ns` (sm_70+; ns a Python int, an immediate), then the traced int32 scalar value unchanged: what
  uses the result is ordered after the sleep (the asm is pure for the compiler, free to move or drop otherwise)."""
  # on a [1] vector: the Pallas Triton lowering gives a scalar asm a 0-d tensor type that scalar code cannot mix with
  [out] = plgpu.elementwise_inline_asm(f"nanosleep.u32 {int(ns)};\n\tmov.u32 $0, $1;",
                                       args=[jnp.broadcast_to(value, (1,))], constraints="=r,r", pack=1,
                                       result_shape_dtypes=[jax.ShapeDtypeStruct((1,), jnp.int32)])
  return jnp.sum(out)


def check_sleep_ns(where, sleep_ns):
  """A counter_wait sleep_ns option: an int in [0, 1_000_000] (nanosleep's own limit is 1 ms)."""
  if not (isinstance(sleep_ns, int) and not isinstance(sleep_ns, bool) and 0 <= sleep_ns <= 1_000_000):
    raise ValueError(f"{where}: wait_sleep_ns {sleep_ns!r} must be an int in [0, 1000000] (0: back-to-back atomic "
                     "polls; > 0: volatile loads with a nanosleep of about that many ns between them)")


def poison_unless(ok):
  """f32 0 when ok, NaN otherwise: added to a waiting program's output tile."""
  return jnp.where(ok, jnp.float32(0.0), jnp.float32(jnp.nan))
