"""Sweeps: a kind over a parameter grid, run cell by cell on a local pool or Ray."""
