"""The walk of a verified tree (custom_calls.tree_verify): from the root, follow the child whose token
equals the target's token at the current node, while one exists; the target's token at the last
accepted node is the next bonus token. Lossless at any temperature."""
from custom_calls.tree_verify import tree_walk


def walk_tree(tree_tokens, parents, valid, target_tokens, max_depth: int):
  """[B, N+1] arrays -> (path [B, max_depth+1], n_accepted [B] (root counted), bonus [B])."""
  return tree_walk(tree_tokens, parents, valid, target_tokens, max_depth)
