"""Model presets as Python files (absl config files / plain functions returning a ModelConfig)."""
