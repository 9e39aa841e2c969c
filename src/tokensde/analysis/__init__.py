"""Measurements of simulated runs: clusters, statistics, Monte Carlo against theory, convergence."""
