"""Powers of two for kernel block sizes (Triton tiles need power-of-two extents)."""


def next_pow2(n: int) -> int:
  """The smallest power of two >= n (1 for n <= 1)."""
  return 1 << max(int(n) - 1, 0).bit_length()


def pow2_at_most(n: int) -> int:
  """The largest power of two <= n (1 for n <= 1)."""
  return 1 << (max(int(n), 1).bit_length() - 1)


def is_pow2(n: int) -> bool:
  return n >= 1 and (n & (n - 1)) == 0
