"""The ViT experiment: does suppressing the value-matrix noise at initialisation cost accuracy?

- `model`: a small readable ViT (standard pre-norm blocks, or the attention-only layer of spec §2);
- `init`: value-matrix initialisation arms (`default`, `noise:LAM`, `hybrid:LAM`, `gaussian:VAR`,
  `identity`, `shared`) that touch the value matrices only;
- `depth`: the depth sweep (arms x depths x seeds x blocks) as the sweep kind `vit_depth`;
- `data`: Fashion-MNIST (Debian package), CIFAR-10 (local pickles), scikit-learn digits;
- `train`: one run with per-epoch checkpoints, resume and a JSONL log;
- `stack`: many attention-only ViTs trained at once (`StackedViT`), for the fair sweep;
- `compare`: arms x seeds and the accuracy table with paired t-intervals;
- `geometry`: token cosine similarity across depth at initialisation;
- `estimate`: the time of training runs, from a few timed steps of the model (`vit_budget`).
"""

from .compare import DataSpec, compact, compare, compare_plan, format_table, summarise, t_interval
from .data import DATASETS, DatasetError, ImageData, MissingDatasetError, load_dataset
from .estimate import StepTime, time_steps, vit_budget
from .geometry import geometry, pair_cosines
from .init import ARM_KINDS, Arm, apply_value_init, make_model, parse_arms, value_weights
from .model import ViT, ViTConfig, build_vit
from .stack import LAYOUT_WARNING, Member, StackedViT
from .train import TrainConfig, lr_at, make_optimizer, train_run

__all__ = [
    "ARM_KINDS",
    "DATASETS",
    "LAYOUT_WARNING",
    "Arm",
    "DataSpec",
    "DatasetError",
    "ImageData",
    "Member",
    "MissingDatasetError",
    "StackedViT",
    "StepTime",
    "TrainConfig",
    "ViT",
    "ViTConfig",
    "apply_value_init",
    "build_vit",
    "compact",
    "compare",
    "compare_plan",
    "format_table",
    "geometry",
    "load_dataset",
    "lr_at",
    "make_model",
    "make_optimizer",
    "pair_cosines",
    "parse_arms",
    "summarise",
    "t_interval",
    "time_steps",
    "train_run",
    "value_weights",
    "vit_budget",
]
