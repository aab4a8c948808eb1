"""Subcommands of the ggufspec CLI, one module each."""
