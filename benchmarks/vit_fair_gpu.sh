#!/usr/bin/env bash
# The fair ViT protocol (issue 25, docs/vit-fair.md) on one GPU, in one call, resumable.
#
#   PYTHONPATH=src bash benchmarks/vit_fair_gpu.sh          # from the repository root
#
# Needs: torch with CUDA, numpy, pandas, pyarrow, scipy, typer, tqdm (matplotlib optional: without
# it the figures are drawn later with `tokensde vit fair-report DIR`), and the data file
# .fair/fashion-mnist-7000-2000.npz, written where the data set is installed by
#   tokensde vit export-data --out .fair/fashion-mnist-7000-2000.npz      (3.8 MiB)
# No network and no data set package are needed on the GPU machine.
#
# What it does, in order (everything it prints also goes to $OUT/log.txt):
#  1. the machine: nvidia-smi, torch and CUDA versions;
#  2. a check that the stacked model computes the same logits on CUDA as on the CPU, and the
#     stacked-vs-single speed ratio on CUDA (benchmarks/bench_vit_stack.py, a few seconds);
#  3. the sweeps, with $FAIR_WORKERS worker processes, cut off together after $FAIR_BUDGET_S
#     seconds (SIGTERM: the finished cells stay; running this script again resumes): with the
#     size `fair`, first `fair-wide` (16 short cells that widen the grid at 1 and 3 epochs) into
#     .fair/vit-fair-wide, then `fair` (80 cells, 960 models) into .fair/vit-fair, budget by
#     budget, the 30-epoch cells last;
#  4. the report of both (fair.md, fair.json; figures if matplotlib is there) of what finished;
#  5. $OUT/vit-fair.tgz (the sweep directories), fair.md, log.txt and gpu.csv (GPU
#     utilisation every 5 s) under $OUT.
# To resume on a fresh machine: unpack vit-fair.tgz into .fair/ and carry .fair again.
# Dry run on a CPU (what tests/test_vit_fair.py does not cover: this script itself):
#   tokensde vit export-data --dataset digits --train 900 --test 200 --out .fair/digits.npz
#   FAIR_DEVICE=cpu FAIR_SIZE=fair-tiny FAIR_DATA=.fair/digits.npz FAIR_DIR=/tmp/ft FAIR_WORKERS=2 \
#       OUT=/tmp/ft-out PYTHONPATH=src bash benchmarks/vit_fair_gpu.sh
# (FAIR_WIDE_SIZE=F.toml adds a sweep that widens the grid to the dry run, as fair-wide does.)
set -u
OUT=${OUT:-.fair/out}
mkdir -p "$OUT" .fair
DATA=${FAIR_DATA:-.fair/fashion-mnist-7000-2000.npz}
SWEEP=${FAIR_DIR:-.fair/vit-fair}
WORKERS=${FAIR_WORKERS:-12}
BUDGET=${FAIR_BUDGET_S:-450}
SIZE=${FAIR_SIZE:-fair}
# the sweep that widens the grid (fair-wide for fair; FAIR_WIDE_SIZE= turns it off)
if [ "$SIZE" = fair ]; then WIDE_SIZE=${FAIR_WIDE_SIZE-fair-wide}; else WIDE_SIZE=${FAIR_WIDE_SIZE:-}; fi
WIDE=
[ -n "$WIDE_SIZE" ] && WIDE=${FAIR_WIDE_DIR:-$SWEEP-wide}
DEVICE=${FAIR_DEVICE:-cuda}
PY=${PYTHON:-python3}
export TOKENSDE_VIT_DEVICE=$DEVICE OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
TOKENSDE=("$PY" -c 'import sys; from tokensde.cli import main; sys.argv[0] = "tokensde"; main()')
exec > >(tee -a "$OUT/log.txt") 2>&1
t_start=$(date +%s)
echo "== $(date -u) vit_fair_gpu.sh: size $SIZE on $DEVICE, data $DATA, sweep $SWEEP,"\
     "$WORKERS workers, budget $BUDGET s"
[ -f "$DATA" ] || { echo "missing $DATA: carry .fair (see the header of this script)"; exit 2; }
# where the data set lives, as an environment variable (TOKENSDE_DATA_<NAME>), not --data-dir:
# the cells keep data_dir = '', so sweeps started elsewhere (benchmarks/results) resume here
DATA_VAR=$("$PY" -c 'import sys, numpy as np; from tokensde.vit.data import data_env
print(data_env(str(np.load(sys.argv[1])["dataset"])))' "$DATA") || { echo "cannot read $DATA"; exit 2; }
export "$DATA_VAR=$DATA"
echo "== $DATA_VAR=$DATA"
SMI=
if [ "$DEVICE" = cuda ]; then
nvidia-smi -L || true
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))'
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -l 5 \
    > "$OUT/gpu.csv" 2>/dev/null &
SMI=$!

echo "== CUDA check: stacked logits on CUDA = on the CPU"
timeout 120 "$PY" - <<'EOF'
import torch
from tokensde.vit import ViTConfig
from tokensde.vit.stack import Member, StackedViT
cfg = ViTConfig(image_size=28, channels=1, patch=7, dim=64, depth=24, heads=1, norm="rms",
                residual_scale=True, block="attention-only")
members = [Member(a, s, 2e-3) for a in ("default", "noise:0", "hybrid:0", "identity")
           for s in range(2)]
x = torch.randn(len(members), 32, 1, 28, 28, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    cpu = StackedViT(cfg, members).forward(x)
    gpu = StackedViT(cfg, members, "cuda").forward(x.cuda()).cpu()
err = (cpu - gpu).abs().max().item()
print(f"max |logit(cuda) - logit(cpu)| = {err:.2e} (logits of size {cpu.abs().mean():.2f});",
      "OK" if err < 1e-3 else "MISMATCH")
EOF
timeout 120 "$PY" benchmarks/bench_vit_stack.py --device cuda --models 12 --steps 5 --rounds 2
fi

sweep() {  # sweep SIZE DIR: run it in what is left of the budget
    local left=$(( BUDGET - ($(date +%s) - t0) ))
    [ "$left" -gt 0 ] || { echo "== $1: no budget left"; return 124; }
    echo "== sweep $1 into $2 ($left s left)"
    timeout -s TERM "$left" "${TOKENSDE[@]}" vit fair --size "$1" --out "$2" \
        --device "$DEVICE" --workers "$WORKERS" --no-figures --quiet
    local rc=$?
    echo "== $1 exit $rc after $(( $(date +%s) - t0 )) s (124/143: cut off by the budget; rerun to resume)"
    return $rc
}
t0=$(date +%s)
[ -n "$WIDE" ] && sweep "$WIDE_SIZE" "$WIDE"
sweep "$SIZE" "$SWEEP"

FIG=--no-figures
"$PY" -c 'import matplotlib' 2>/dev/null && FIG=--figures
"${TOKENSDE[@]}" vit fair-report "$SWEEP" ${WIDE:+"$WIDE"} $FIG || echo "no report (no finished cell?)"
"${TOKENSDE[@]}" sweep status "$SWEEP" 2>/dev/null | head -20 || true
[ -n "$SMI" ] && kill "$SMI" 2>/dev/null
cp "$SWEEP/fair.md" "$OUT/" 2>/dev/null
absdir() { (cd "$(dirname "$1")" && pwd); }
tar czf "$OUT/vit-fair.tgz" -C "$(absdir "$SWEEP")" "$(basename "$SWEEP")" \
    ${WIDE:+-C "$(absdir "$WIDE")" "$(basename "$WIDE")"}
echo "== done in $(( $(date +%s) - t_start )) s; $(ls -la "$OUT" | wc -l) entries in $OUT"
ls -la "$OUT"
