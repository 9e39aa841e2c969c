"""The study: every figure of the report as data, and `reproduce` to build them all.

Each figure (`FIGURES[name]`, a `FigureSpec`) goes name -> compute (a library call) -> saved result
under `OUT/data/` or `OUT/sweeps/` -> plot (`tokensde.plots`) -> report section:

- `context`: `Context` (output directory, size, seed, workers), `FigureSpec` (name, title, claim,
  `data`, `draw`), `saved_or` (reuse a saved result made with the same settings, else compute
  and save it), the process pool;
- `phase`: two tokens (`phase-diagram`, `theory-vs-simulation`, `phase-over-d`,
  `decision-times`);
- `animation`: `tokens-in-motion` (one run per dimension, token positions saved as a table,
  drawn as an animated GIF);
- `trajectories`: `trajectories` and `histograms` (single simulations saved per panel);
- `multi`: `multi-token` (a resumable sweep; the sweep files ship in `study/sweeps/`);
- `convergence`: `convergence` (weak and strong errors, resumable by chunk);
- `vit`: `vit` and `vit-depth` (ViT training runs);
- `registry`: `FIGURES` in report order, `build_section` (a failure becomes a 'failed' section);
- `reproduce`: `reproduce(out, size, ...)` builds the sections and writes `OUT/report.html`.

The command line (`tokensde figure`, `tokensde reproduce`) is a thin shell over this package,
which never imports the CLI.
"""

from .context import STUDY_SIZES, SWEEP_DIR, Context, FigureSpec
from .convergence import convergence_data
from .registry import FIGURES, build_section
from .reproduce import reproduce

__all__ = ["FIGURES", "STUDY_SIZES", "SWEEP_DIR", "Context", "FigureSpec", "build_section",
           "convergence_data", "reproduce"]
