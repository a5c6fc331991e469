"""Speculative decoding on the device: the DDTree draft tree (tree), the walk (verify), one round (step)."""
