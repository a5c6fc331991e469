"""ddtree-jax: Kimi K2.6 (DeepSeek-V3 architecture) inference in JAX with DDTree speculative decoding."""
__version__ = "0.1.0"
