"""Figures. Each module plots saved results (tables, arrays); none re-runs a simulation.

- `style`: the shared look (palette, rcParams, `new_figure`, atomic `save`);
- `convergence`: log-log weak/strong errors of the network against the SDE;
- `animation`: tokens in motion, an animated GIF of tokens on the circle and the sphere across
  depth with their clusters and antipodal pairs;
- `trajectories`: tokens on the circle and the sphere, PNG and animated GIF;
- `histograms`: the law of pairwise inner products across depth;
- `phase`, `multi`, `vit`, `simulation`: two-token phase diagram, multi-token sweeps, ViT runs,
  one `simulate` result;
- `mlp`, `variants`, `vit_depth`: two tokens with the MLP block, the model variants, ViT depth;
- `token_noise`: the phase diagram of independent token noise beside the common-noise one.

Submodules are imported on use (`from tokensde.plots.convergence import plot_convergence`), so
importing the package does not load matplotlib.
"""

__all__ = ["animation", "convergence", "histograms", "meanfield", "mlp", "multi", "phase", "real",
           "simulation", "style", "token_noise", "trajectories", "variants", "vit", "vit_depth",
           "vit_fair"]
