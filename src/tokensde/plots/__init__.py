"""Figures. Each module plots saved results (tables, arrays); none re-runs a simulation."""
