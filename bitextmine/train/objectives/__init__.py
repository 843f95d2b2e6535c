"""Training objectives: each a module with its heads, turning an encoded pair batch into a loss."""
