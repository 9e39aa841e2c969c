"""Exact results (numpy/scipy only): two-token laws, first passage, decision times."""
