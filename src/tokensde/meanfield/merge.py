"""Node merging: nodes with `1 - <x_i, x_j> < tol`, joined transitively, become one node carrying
their summed weight at their normalised weighted mean.

The groups are the connected components of the graph of close pairs. On the circle they come from
the sorted angles (a group is a chain of angles split at gaps of at least `arccos(1 - tol)`); on
the sphere, up to `DENSE_MAX` nodes, and in dimensions above 3, from the `K x K` inner products;
on the sphere above `DENSE_MAX` nodes cluster by cluster, from a grid of cubes whose side is the
merge distance, so that only nodes in neighbouring cubes are compared. All three give the
same groups (tested), each led by its smallest node index.
"""

from __future__ import annotations

import math

import torch

from ..analysis.clusters import check_gap_tol, is_merged
from ..model.checks import ParameterError
from ..sim.decide import DENSE_MAX, angle_of_gap
from ..sim.layers import normalize

# bits of one grid coordinate and of the run index in a packed int64 cube key (`_sphere_leads`)
KEY_BITS = 62


def merge_nodes(x: torch.Tensor, w: torch.Tensor, tol: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge nodes with `1 - <x_i, x_j> < tol` (transitively): weights summed, positions their
    normalised weighted mean; the node axis is then cut to the largest live count of the batch
    (live nodes first, heaviest first; the rest carry weight 0). `(runs, K, d), (runs, K)` in.

    Args:
        x: Unit nodes `(runs, K, d)`.
        w: Their weights `(runs, K)` (0: a dead node).
        tol: The merge threshold on `1 - <x_i, x_j>`.

    Returns:
        The merged nodes and weights.
    """
    check_nodes(x, w)
    lead = group_leads(x, w, check_gap_tol(tol))
    wn = torch.zeros_like(w).scatter_add_(-1, lead, w)
    xs = torch.zeros_like(x).scatter_add_(-2, lead.unsqueeze(-1).expand_as(x), w.unsqueeze(-1) * x)
    keep = wn > 0
    xn = torch.where(keep.unsqueeze(-1), normalize(torch.where(keep.unsqueeze(-1), xs, x)), x)
    order = torch.argsort(wn, dim=-1, descending=True, stable=True)
    top = max(1, int(keep.sum(-1).max()))
    order = order[..., :top]
    return xn.gather(-2, order.unsqueeze(-1).expand(*order.shape, x.shape[-1])), wn.gather(-1, order)


def check_nodes(x: torch.Tensor, w: torch.Tensor) -> None:
    """Raise TypeError / ParameterError (naming `x` or `w`) unless `x` is a tensor of nodes
    `(runs, K, d)`, d >= 2, and `w` a tensor of their weights `(runs, K)`."""
    for name, t in (("x", x), ("w", w)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor; got {type(t).__name__}")
    if x.dim() != 3 or x.shape[-1] < 2:
        raise ParameterError(f"x must be nodes (runs, K, d), d >= 2; got shape {tuple(x.shape)}")
    if tuple(w.shape) != tuple(x.shape[:2]):
        raise ParameterError(f"w must be the weights (runs, K) = {tuple(x.shape[:2])} of x; got "
                             f"shape {tuple(w.shape)}")


def group_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """`(runs, K)`: the smallest index of each live node's group (nodes joined transitively when
    `1 - <x_i, x_j> < tol`); a dead node leads itself. Sorted angles on the circle; on the
    sphere `K x K` inner products up to `DENSE_MAX` nodes, a grid above; inner products above 3
    dimensions.

    Args:
        x: Unit nodes `(runs, K, d)`.
        w: Their weights `(runs, K)`.
        tol: The merge threshold on `1 - <x_i, x_j>`.

    Returns:
        The lead of every node.
    """
    K, d = x.shape[-2], x.shape[-1]
    if d == 2:
        return circle_leads(x, w, tol)
    if K <= DENSE_MAX or d > 3:
        return dense_leads(x, w, tol)
    return sphere_leads(x, w, tol)


def dense_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """`group_leads` from the `K x K` inner products: each node takes the smallest lead among
    its close nodes, then follows its lead's lead, until nothing changes (the connected
    components of the graph of close pairs)."""
    K = x.shape[-2]
    live = w > 0
    close = is_merged(x @ x.transpose(-1, -2), tol) & live.unsqueeze(-1) & live.unsqueeze(-2)
    close |= torch.eye(K, dtype=torch.bool, device=x.device)
    lead = torch.arange(K, device=x.device).expand(w.shape).contiguous()
    while True:
        nxt = torch.where(close, lead.unsqueeze(-2), K).amin(-1)
        nxt = nxt.gather(-1, nxt)
        if torch.equal(nxt, lead):
            return lead
        lead = nxt


def circle_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """`group_leads` for circle nodes `(runs, K, 2)` in O(K log K): `1 - <x_i, x_j> < tol` iff the
    angles are closer than `A = arccos(1 - tol)`, so the groups are the chains of sorted live
    angles split at the gaps of at least `A` (the last chain joins the first when the gap across
    the cut of the circle is below `A`)."""
    runs, K = w.shape
    live = w > 0
    theta = torch.atan2(x[..., 1], x[..., 0]).double()
    srt, perm = torch.where(live, theta, math.inf).sort(-1)  # live angles first, ascending
    count = live.sum(-1, keepdim=True)
    pos = torch.arange(K, device=x.device).expand(runs, K)
    a = angle_of_gap(tol)
    nxt = torch.cat([srt[:, 1:], srt[:, :1]], -1)
    cut = (nxt - srt >= a) & (pos < count - 1)  # a gap after sorted position i (i < L - 1)
    chain = torch.cat([torch.zeros_like(cut[:, :1]), cut[:, :-1]], -1).long().cumsum(-1)
    last = chain.gather(-1, count - 1)
    wrap = srt.gather(-1, torch.zeros_like(count)) + 2 * math.pi - srt.gather(-1, count - 1)
    chain = torch.where((chain == last) & (wrap < a), 0, chain)  # the last chain meets the first
    chain = torch.where(pos < count, chain, K + pos)  # dead nodes: groups of their own
    node = torch.empty_like(chain).scatter_(-1, perm, chain)  # each node's group
    lead = torch.full((runs, 2 * K), K, dtype=torch.long, device=x.device)
    lead.scatter_reduce_(-1, node, pos, "amin")
    return lead.gather(-1, node)


def sphere_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """`group_leads` for sphere nodes `(runs, K, 3)` without a `K x K` array. Close nodes are less
    than `h = sqrt(2 tol)` apart (`|x_i - x_j|^2 = 2 (1 - <x_i, x_j>)`), so they lie in the same
    or neighbouring cubes of side `h`: the cubes are sorted once, the pairs in each of the 27
    neighbourhoods tested with the dense formula, and the groups joined by label propagation.
    Work `O(K log K)` plus the pairs in neighbouring cubes (a few per node, since nodes of one
    cube that are not merged are at least `h` apart)."""
    runs = x.shape[0]
    h = math.sqrt(2.0 * tol) * (1.0 + 1e-6) + 1e-15  # a margin above rounding of the unit norms
    side = math.ceil(1.0 / h) + 2  # grid coordinates lie in [-side, side)
    bits = max(1, math.ceil(math.log2(2 * side + 3)))
    room = KEY_BITS - 3 * bits
    if room < 1:
        return dense_leads(x, w, tol)
    step = 1 << room  # runs whose keys fit in one int64 sort
    return torch.cat([_grid_leads(x[lo:lo + step], w[lo:lo + step], tol, h, bits)
                      for lo in range(0, runs, step)])


def _grid_leads(x: torch.Tensor, w: torch.Tensor, tol: float, h: float, bits: int
                ) -> torch.Tensor:
    runs, K, _ = x.shape
    dev = x.device
    r, i = (w > 0).nonzero(as_tuple=True)
    flat = r * K + i  # live nodes, as indices into the flattened batch
    xf = x.reshape(-1, 3)
    q = torch.floor(xf[flat] / h).long() + (1 << (bits - 1))
    key = _pack(r, q, bits)
    srt, perm = key.sort()
    pairs_a, pairs_b = [], []
    for off in _offsets(dev):
        nk = _pack(r, q + off, bits)
        lo = torch.searchsorted(srt, nk, right=False)
        hi = torch.searchsorted(srt, nk, right=True)
        cnt = hi - lo
        a = torch.repeat_interleave(torch.arange(len(flat), device=dev), cnt)
        if not len(a):
            continue
        start = torch.repeat_interleave(lo - torch.cumsum(cnt, 0) + cnt, cnt)
        b = perm[start + torch.arange(len(a), device=dev)]
        a_f, b_f = flat[a], flat[b]
        keep = a_f < b_f
        a_f, b_f = a_f[keep], b_f[keep]
        g = (xf[a_f] * xf[b_f]).sum(-1)
        close = is_merged(g, tol)
        pairs_a.append(a_f[close])
        pairs_b.append(b_f[close])
    lead = torch.arange(runs * K, device=dev)
    if pairs_a:
        ea, eb = torch.cat(pairs_a), torch.cat(pairs_b)
        while True:
            low = torch.minimum(lead[ea], lead[eb])
            nxt = lead.clone()
            nxt.scatter_reduce_(0, ea, low, "amin")
            nxt.scatter_reduce_(0, eb, low, "amin")
            nxt = nxt[nxt]
            if torch.equal(nxt, lead):
                break
            lead = nxt
    return (lead - torch.arange(runs, device=dev).repeat_interleave(K) * K).view(runs, K)


def _pack(r: torch.Tensor, q: torch.Tensor, bits: int) -> torch.Tensor:
    """One int64 per (run, cube): the run index above three `bits`-bit grid coordinates."""
    return (((r << bits | q[:, 0]) << bits | q[:, 1]) << bits) | q[:, 2]


def _offsets(device: torch.device) -> torch.Tensor:
    """The 27 offsets of a cube's neighbourhood, `(27, 3)`."""
    o = torch.tensor([-1, 0, 1], device=device)
    return torch.cartesian_prod(o, o, o)
