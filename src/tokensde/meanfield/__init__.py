"""n particles and the many-token limit on common noise paths (docs/meanfield.md).

With common noise only, every token moves by the same random flow, so the token measure is its
initial measure pushed forward; a weighted node set moved by the same layers carries the
many-token limit. The modules, by concept:

- `flow`: `run_coupled` advances several weighted systems (particles at several n, the limit at
  K nodes) on the same noise path; `System`, `FlowResult`;
- `quadrature`: nodes and weights on the sphere (`sphere_rule`) and initial densities;
- `statistics`: minority mass, atoms and arc masses of a system at absorption;
- `absorption`: the laws over noise paths at absorption (`absorption_table`);
- `convergence`: errors of K nodes and of n particles against the limit
  (`node_convergence`, `particle_convergence`);
- `merge`: node merging by connected components (`merge_nodes`);
- `kind`: the sweep kind `meanfield`, and `meanfield table` as a sweep of it (`table_config`,
  `table_frame`).

Names load on first use, so importing the package does not import torch. Names not in `__all__`
are internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .absorption import absorption_table
    from .convergence import node_convergence, particle_convergence
    from .flow import FlowResult, System, run_coupled
    from .kind import table_config, table_frame
    from .merge import merge_nodes
    from .quadrature import sphere_rule
    from .statistics import minority_mass

__all__ = [
    "FlowResult",
    "System",
    "absorption_table",
    "merge_nodes",
    "minority_mass",
    "node_convergence",
    "particle_convergence",
    "run_coupled",
    "sphere_rule",
    "table_config",
    "table_frame",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
