"""Pictures of what the engine does: one round's draft tree (tree_plot) and the round traces they are drawn from."""
from ddtree_jax.viz.trace import RoundTrace, trace_round, tracing
from ddtree_jax.viz.tree_plot import node_roles, plot_tree, token_label

__all__ = ["RoundTrace", "trace_round", "tracing", "node_roles", "plot_tree", "token_label"]
