"""Image data sets read from local files only (no downloads).

- `fashion-mnist`: Debian's `dataset-fashion-mnist` (IDX `.gz` files in
  /usr/share/datasets/fashion-mnist), 60000 + 10000 grey 28x28 images;
- `cifar10`: the standard "CIFAR-10 python version" pickles (`data_batch_1..5`, `test_batch`) in
  a directory the user gives; 50000 + 10000 colour 32x32 images;
- `digits`: scikit-learn's bundled 8x8 digits (1797 images), split 1437 / 360 with a fixed seed.

Any of them can also be read from one compressed `.npz` file written by `export_npz` (the first N
training and test images, raw bytes, with the data set's name): pass the file as `data_dir`. This
carries a subset to a machine without the data set's package (about 3 MB for 7000 + 2000
Fashion-MNIST images).

A validation split (`val_subset`) is taken from the *training* file: the `val_subset` images that
follow the kept training images. The test images are never used for it.

Images come out as float32 `(N, C, H, W)`, standardised per channel with the training set's mean and
standard deviation; labels as int64 `(N,)`.
"""

from __future__ import annotations

import gzip
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from ..io.store import atomic_write
from ..model.params import ParameterError, _check_choice, _check_int

DATASETS: tuple[str, ...] = ("fashion-mnist", "cifar10", "digits")
_FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
_FASHION_FILES = {
    "x_train": "train-images-idx3-ubyte.gz", "y_train": "train-labels-idx1-ubyte.gz",
    "x_test": "t10k-images-idx3-ubyte.gz", "y_test": "t10k-labels-idx1-ubyte.gz",
}
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST = "test_batch"
_IDX_MAGIC = {3: 2051, 1: 2049}  # IDX magic number by number of dimensions (images, labels)
_DIGITS_TEST = 360
# Light augmentation per data set: random shift of up to `shift` pixels, random horizontal flip.
# None for the 8x8 digits, where a one-pixel shift already costs a third of one-epoch accuracy.
_AUGMENT: dict[str, tuple[int, bool]] = {"fashion-mnist": (2, False), "cifar10": (2, True),
                                        "digits": (0, False)}

_HOW_TO_GET = {
    "fashion-mnist": "install it with `sudo apt-get install dataset-fashion-mnist` "
                     f"(Debian/Ubuntu), which puts the files in {_FASHION_DIR}, or pass "
                     "--data-dir to a directory holding " + ", ".join(_FASHION_FILES.values()),
    "cifar10": "download 'CIFAR-10 python version' (cifar-10-python.tar.gz) from "
               "https://www.cs.toronto.edu/~kriz/cifar.html on a machine with network access, "
               "unpack it and pass --data-dir to the cifar-10-batches-py directory",
}


class MissingDatasetError(FileNotFoundError):
    """A data set's files are not where they were looked for; the message says how to get them."""


class DatasetError(ValueError):
    """A data set file that exists but cannot be read (corrupt or of the wrong format)."""


@dataclass(frozen=True, eq=False)
class ImageData:
    """Train / test images `(N, C, H, W)` float32, labels `(N,)` int64, and where they came from."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    classes: int
    info: dict[str, Any] = field(default_factory=dict)
    shift: int = 0
    flip: bool = False
    x_val: torch.Tensor | None = None
    y_val: torch.Tensor | None = None

    @property
    def channels(self) -> int:
        """Colour channels C."""
        return int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        """Side H = W of the (square) images."""
        return int(self.x_train.shape[-1])


def _missing(name: str, path: Path) -> MissingDatasetError:
    return MissingDatasetError(f"{name} data set not found: {path} does not exist; "
                               f"{_HOW_TO_GET[name]}")


def _read_idx(path: Path) -> np.ndarray:
    """Read a gzip-compressed IDX file (unsigned bytes) into an array of its stated shape."""
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    if len(raw) < 8 or raw[:2] != b"\0\0" or raw[2] != 0x08:
        raise DatasetError(f"{path} is not an IDX file of unsigned bytes")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(int)
    start = 4 + 4 * ndim
    if int.from_bytes(raw[:4], "big") != _IDX_MAGIC.get(ndim) or len(raw) != start + dims.prod():
        raise DatasetError(f"{path} has a bad IDX header or length (dims {dims.tolist()})")
    return np.frombuffer(raw, dtype=np.uint8, offset=start).reshape(dims)


def _read_fashion_mnist(data_dir: str | Path | None = None) -> dict[str, np.ndarray]:
    """The four Fashion-MNIST arrays: uint8 images `(N, 28, 28)` and labels `(N,)`."""
    root = Path(data_dir) if data_dir is not None else _FASHION_DIR
    out = {}
    for key, fname in _FASHION_FILES.items():
        path = root / fname
        if not path.is_file():
            raise _missing("fashion-mnist", path)
        out[key] = _read_idx(path)
    return out


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickle only dicts, lists, bytes and numpy arrays: CIFAR files cannot run code.

    (`_codecs.encode` is how protocol-2 pickles written by Python 3 spell a bytes object.)
    """

    ALLOWED: ClassVar[set[tuple[str, str]]] = {
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch: uint8 images `(N, 3, 32, 32)` and int64 labels `(N,)`."""
    try:
        with open(path, "rb") as fh:
            batch = _ArrayUnpickler(fh, encoding="bytes").load()
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError) as err:
        raise DatasetError(f"{path} is not a CIFAR-10 python batch: {err}") from err
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
        raise DatasetError(f"{path}: expected data (N, 3072) and N labels; got {data.shape} and "
                           f"{len(labels)} labels")
    return data.reshape(-1, 3, 32, 32), labels


def _read_cifar10(data_dir: str | Path | None) -> dict[str, np.ndarray]:
    """CIFAR-10 from `data_dir` (or its `cifar-10-batches-py` sub-directory)."""
    if data_dir is None:
        raise MissingDatasetError(f"cifar10 needs --data-dir; {_HOW_TO_GET['cifar10']}")
    root = Path(data_dir)
    if not (root / _CIFAR_TEST).is_file() and (root / "cifar-10-batches-py").is_dir():
        root = root / "cifar-10-batches-py"
    for fname in (*_CIFAR_TRAIN, _CIFAR_TEST):
        if not (root / fname).is_file():
            raise _missing("cifar10", root / fname)
    train = [_read_cifar_batch(root / f) for f in _CIFAR_TRAIN]
    x_test, y_test = _read_cifar_batch(root / _CIFAR_TEST)
    return {"x_train": np.concatenate([x for x, _ in train]),
            "y_train": np.concatenate([y for _, y in train]), "x_test": x_test, "y_test": y_test}


_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")


def _read_npz(path: str | Path, name: str) -> dict[str, np.ndarray]:
    """The four arrays of a file written by `export_npz`, checked to hold data set `name`."""
    path = Path(path)
    if not path.is_file():
        raise MissingDatasetError(f"{name} data file {path} does not exist; write it with "
                                  "`tokensde vit export-data` where the data set is installed")
    try:
        with np.load(path, allow_pickle=False) as z:
            found = str(z["dataset"])
            arrays = {k: np.asarray(z[k]) for k in _NPZ_KEYS}
    except (OSError, KeyError, ValueError) as err:
        raise DatasetError(f"{path} is not a data file written by export_npz: {err}") from err
    if found != name:
        raise DatasetError(f"{path} holds data set {found!r}, not {name!r}")
    for part in ("train", "test"):
        if len(arrays[f"x_{part}"]) != len(arrays[f"y_{part}"]):
            raise DatasetError(f"{path}: {part} images and labels differ in number")
    return arrays


def _data_env(name: str) -> str:
    """The environment variable that says where data set `name` lives on this machine (a
    directory or a `.npz` file), used when no `data_dir` is given: `TOKENSDE_DATA_FASHION_MNIST`,
    `TOKENSDE_DATA_CIFAR10`, `TOKENSDE_DATA_DIGITS`. A location, not a parameter, so a sweep
    resumed on another machine keeps its cells."""
    return "TOKENSDE_DATA_" + name.upper().replace("-", "_")


def _read_arrays(name: str, data_dir: str | Path | None = None) -> tuple[dict[str, np.ndarray], str]:
    """Raw arrays of data set `name` (uint8 or float images, int labels) and where they came from;
    `data_dir` may be a `.npz` file written by `export_npz`; without it, `data_env(name)` if set."""
    _check_choice("dataset", name, DATASETS)
    if not data_dir and os.environ.get(_data_env(name)):
        data_dir = os.environ[_data_env(name)]
        if not Path(data_dir).exists():
            raise MissingDatasetError(f"{_data_env(name)}={data_dir} does not exist (it says where "
                                      f"{name} lives when no data_dir is given)")
    data_dir = data_dir or None
    if name == "digits" and data_dir is not None and not str(data_dir).endswith(".npz"):
        raise ParameterError(f"data_dir must be left out for the digits data set (it comes with "
                             f"scikit-learn), or be an .npz file written by export-data; got "
                             f"{str(data_dir)!r}")
    if data_dir is not None and str(data_dir).endswith(".npz"):
        return _read_npz(data_dir, name), str(data_dir)
    if name == "fashion-mnist":
        return _read_fashion_mnist(data_dir), str(data_dir or _FASHION_DIR)
    if name == "cifar10":
        return _read_cifar10(data_dir), str(data_dir)
    return _read_digits(), (f"sklearn.datasets.load_digits, {_DIGITS_TEST} test images by "
                           "permutation seed 0")


def _export_npz(name: str, path: str | Path, train: int, test: int,
               data_dir: str | Path | None = None) -> dict[str, Any]:
    """Write the first `train` training and `test` test images (and labels) of data set `name`
    into the compressed file `path`; return what was written."""
    train, test = _check_int("train", train, 1), _check_int("test", test, 1)
    if not str(path).endswith(".npz"):
        raise ParameterError(f"path must end in .npz; got {str(path)!r}")
    arrays, source = _read_arrays(name, data_dir)
    for part, n in (("train", train), ("test", test)):
        if n > len(arrays[f"y_{part}"]):
            raise ParameterError(f"{part} must be <= {len(arrays[f'y_{part}'])} (the {name} "
                                 f"{part} images); got {n!r}")
    out = {"x_train": arrays["x_train"][:train], "y_train": arrays["y_train"][:train],
           "x_test": arrays["x_test"][:test], "y_test": arrays["y_test"][:test]}

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            np.savez_compressed(fh, allow_pickle=False, dataset=np.array(name),
                                source=np.array(source), x_train=out["x_train"],
                                y_train=out["y_train"], x_test=out["x_test"], y_test=out["y_test"])

    atomic_write(Path(path), write)
    return {"path": str(path), "dataset": name, "source": source, "train": train, "test": test,
            "bytes": Path(path).stat().st_size}


def _read_digits() -> dict[str, np.ndarray]:
    """scikit-learn's digits, 0..16 grey levels `(N, 8, 8)`, split by a fixed permutation.

    Returns:
        `x_train`, `y_train`, `x_test`, `y_test`: images `(N, 8, 8)` and labels, the first
        `_DIGITS_TEST` images of a fixed permutation (seed 0) for testing.

    Raises:
        MissingDatasetError: scikit-learn is not installed (it comes with the `vit` extra).
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as err:
        raise MissingDatasetError(
            "the digits data set comes with scikit-learn, which is not installed: "
            "pip install 'tokensde[vit]'") from err

    bunch = load_digits()
    order = np.random.default_rng(0).permutation(len(bunch.target))
    test, train = order[:_DIGITS_TEST], order[_DIGITS_TEST:]
    x, y = bunch.images.astype(np.float32), bunch.target.astype(np.int64)
    return {"x_train": x[train], "y_train": y[train], "x_test": x[test], "y_test": y[test]}


def _standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """`(x - mean_c) / std_c` with the training images' per-channel statistics, as (N, C, H, W)."""
    def nchw(x: np.ndarray) -> np.ndarray:
        return (x[:, None] if x.ndim == 3 else x).astype(np.float32)

    tr, te = nchw(x_train), nchw(x_test)
    mean = tr.mean(axis=(0, 2, 3), keepdims=True)
    std = tr.std(axis=(0, 2, 3), keepdims=True) + 1e-8
    stats = {"mean": mean.ravel().tolist(), "std": std.ravel().tolist()}
    return torch.from_numpy((tr - mean) / std), torch.from_numpy((te - mean) / std), stats


def load_dataset(name: str, data_dir: str | Path | None = None, train_subset: int | None = None,
                 test_subset: int | None = None, val_subset: int | None = None) -> ImageData:
    """Load `name` (one of DATASETS); keep the first `train_subset` / `test_subset` images, and
    hold out the `val_subset` training images after them as a validation set (all training
    images but the last `val_subset` when `train_subset` is None).

    Args:
        name: 'fashion-mnist', 'cifar10' or 'digits'.
        data_dir: A directory of the data set's files or a `.npz` from `export_npz` (None: the
            default place, or the `TOKENSDE_DATA_*` variable).
        train_subset: Training images kept (None: all).
        test_subset: Test images kept (None: all).
        val_subset: Training images held out for validation (None: none).

    Returns:
        `ImageData`: standardised image tensors, labels and where they came from.

    Raises:
        MissingDatasetError: The files are not there (the message says how to get them).
        DatasetError: A file is corrupt or of the wrong format.
    """
    _check_choice("dataset", name, DATASETS)
    arrays, source = _read_arrays(name, data_dir)
    total_train = len(arrays["y_train"])
    val = 0 if val_subset is None else _check_int("val_subset", val_subset, 1)
    if val:
        keep = total_train - val if train_subset is None else _check_int(
            "train_subset", train_subset, 1)
        if keep < 1 or keep + val > total_train:
            raise ParameterError(f"train_subset + val_subset must be <= {total_train} (the {name} "
                                 f"training images in {source}); got {keep} + {val}")
        arrays["x_val"] = arrays["x_train"][keep:keep + val]
        arrays["y_val"] = arrays["y_train"][keep:keep + val]
        train_subset = keep
    sizes = {}
    for part, limit in (("train", train_subset), ("test", test_subset)):
        total = len(arrays[f"y_{part}"])
        keep = total if limit is None else min(_check_int(f"{part}_subset", limit, 1), total)
        for key in (f"x_{part}", f"y_{part}"):
            arrays[key] = arrays[key][:keep]
        sizes[part] = f"first {keep} of {total}"
    x_train, x_test, stats = _standardise(arrays["x_train"], arrays["x_test"])
    shift, flip = _AUGMENT[name]
    info = {"dataset": name, "source": source, "train": sizes["train"], "test": sizes["test"],
            "normalisation": stats, "augment": {"shift": shift, "flip": flip}}
    labels = {k: torch.from_numpy(arrays[k].astype(np.int64)) for k in ("y_train", "y_test")}
    x_val = y_val = None
    if val and train_subset is not None:
        _, x_val, _ = _standardise(arrays["x_train"], arrays["x_val"])
        y_val = torch.from_numpy(arrays["y_val"].astype(np.int64))
        info["val"] = f"training images {train_subset}..{train_subset + val - 1} of {total_train}"
    return ImageData(name, x_train, labels["y_train"], x_test, labels["y_test"], 10, info,
                     shift, flip, x_val, y_val)
