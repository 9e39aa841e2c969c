"""Node merging: nodes with `1 - <x_i, x_j> < tol`, joined transitively, become one node carrying
their summed weight at their normalised weighted mean.

The groups are the connected components of the graph of close pairs. On the circle they come from
the sorted angles (a group is a chain of angles split at gaps of at least `arccos(1 - tol)`); on
the sphere, up to `DENSE_MAX` nodes, and in dimensions above 3, from the `K x K` inner products;
on the sphere above `DENSE_MAX` nodes from a grid of cubes whose diagonal is below the merge
distance: the nodes of one cube are one group, and neighbouring cubes are joined from the bounding
boxes of their nodes, pairs being compared only where the boxes do not decide (O(K log K) time and
O(K) memory for tight clusters, such as the atoms of a decided run). All three give the
same groups (tested), each led by its smallest node index.
"""

from __future__ import annotations

import math

import torch

from ..analysis.clusters import _check_gap_tol, is_merged
from ..model.checks import ParameterError
from ..sim.decide import _DENSE_MAX, _angle_of_gap
from ..sim.layers import normalize

# bits of one grid coordinate and of the run index in a packed int64 cube key (`sphere_leads`)
_KEY_BITS = 62
# relative margin of the squared distances in `sphere_leads`' certificates (cube diagonal, box
# spans and gaps), far above the rounding of unit vectors' inner products at tolerances of at
# least CERTIFY_ULPS machine epsilons
_CELL_MARGIN = 1e-3
_CERTIFY_ULPS = 1e5
_PAIR_CHUNK = 1 << 18  # node pairs tested at once where boxes do not decide (`_any_close_pair`)


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
    _check_nodes(x, w)
    lead = _group_leads(x, w, _check_gap_tol(tol))
    wn = torch.zeros_like(w).scatter_add_(-1, lead, w)
    xs = torch.zeros_like(x).scatter_add_(-2, lead.unsqueeze(-1).expand_as(x), w.unsqueeze(-1) * x)
    keep = wn > 0
    xn = torch.where(keep.unsqueeze(-1), normalize(torch.where(keep.unsqueeze(-1), xs, x)), x)
    order = torch.argsort(wn, dim=-1, descending=True, stable=True)
    top = max(1, int(keep.sum(-1).max()))
    order = order[..., :top]
    return xn.gather(-2, order.unsqueeze(-1).expand(*order.shape, x.shape[-1])), wn.gather(-1, order)


def _check_nodes(x: torch.Tensor, w: torch.Tensor) -> None:
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


def _group_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
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
        return _circle_leads(x, w, tol)
    if K <= _DENSE_MAX or d > 3:
        return _dense_leads(x, w, tol)
    return _sphere_leads(x, w, tol)


def _dense_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
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


def _circle_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
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
    a = _angle_of_gap(tol)
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


def _sphere_leads(x: torch.Tensor, w: torch.Tensor, tol: float) -> torch.Tensor:
    """`group_leads` for sphere nodes `(runs, K, 3)` without a `K x K` array, in O(K log K) time
    and O(K) memory when the groups are tight (as at absorption). Close nodes are less than `h =
    sqrt(2 tol)` apart (`|x_i - x_j|^2 = 2 (1 - <x_i, x_j>)`). The nodes go into cubes of side
    `(1 - CELL_MARGIN) h / sqrt 3`, whose diagonal is below `h`, so the nodes of one cube form one
    group with no pair tested; two cubes up to 2 apart in each coordinate are joined when the
    bounding boxes of their nodes show every cross pair close, left apart when they show none,
    and otherwise by testing their cross pairs with the dense formula (in chunks of PAIR_CHUNK);
    the groups of cubes then follow by label propagation. Below CERTIFY_ULPS units of rounding
    (a tolerance the certificates cannot tell from rounding) every pair in neighbouring cubes of
    side `h` is tested instead (`_pair_leads`)."""
    runs = x.shape[0]
    certify = tol >= _CERTIFY_ULPS * float(torch.finfo(x.dtype).eps)
    h = math.sqrt(2.0 * tol)
    cell = h * (1.0 - _CELL_MARGIN) / math.sqrt(3.0) if certify else (
        h * (1.0 + 1e-6) + 1e-15)  # a margin above rounding of the unit norms
    side = math.ceil(1.0 / cell) + 2  # grid coordinates lie in [-side, side)
    bits = max(1, math.ceil(math.log2(2 * side + 3)))
    room = _KEY_BITS - 3 * bits
    if room < 1:
        return _dense_leads(x, w, tol)
    step = 1 << room  # runs whose keys fit in one int64 sort
    fn = _cell_leads if certify else _pair_leads
    return torch.cat([fn(x[lo:lo + step], w[lo:lo + step], tol, cell, bits)
                      for lo in range(0, runs, step)])


def _cell_leads(x: torch.Tensor, w: torch.Tensor, tol: float, cell: float, bits: int
                ) -> torch.Tensor:
    """`sphere_leads` by cubes whose nodes are one group (the certified path)."""
    runs, K, _ = x.shape
    dev = x.device
    r, i = (w > 0).nonzero(as_tuple=True)
    if not len(r):  # no live node: each leads itself
        return torch.arange(K, device=dev).expand(runs, K).contiguous()
    flat = r * K + i  # live nodes, as indices into the flattened batch
    pts = x.reshape(-1, 3)[flat]
    q = torch.floor(pts / cell).long() + (1 << (bits - 1))
    srt, perm = _pack(r, q, bits).sort()
    keys, of_sorted, count = torch.unique_consecutive(srt, return_inverse=True,
                                                      return_counts=True)
    cells = len(keys)
    of = torch.empty_like(of_sorted).scatter_(0, perm, of_sorted)  # each live node's cube
    first = torch.cumsum(count, 0) - count  # where each cube starts in the sorted order
    idx = of.unsqueeze(-1).expand(-1, 3)
    box_lo = torch.full((cells, 3), math.inf, dtype=x.dtype, device=dev).scatter_reduce_(
        0, idx, pts, "amin")
    box_hi = torch.full((cells, 3), -math.inf, dtype=x.dtype, device=dev).scatter_reduce_(
        0, idx, pts, "amax")
    head = perm[first]
    cr, cq = r[head], q[head]
    h2 = 2.0 * tol
    joined_a, joined_b, maybe_a, maybe_b = [], [], [], []
    for off in _half_offsets(dev):
        nk = _pack(cr, cq + off, bits)
        j = torch.searchsorted(keys, nk).clamp_(max=cells - 1)
        found = keys[j] == nk
        a, b = found.nonzero().flatten(), j[found]
        gap = torch.maximum(box_lo[b] - box_hi[a], box_lo[a] - box_hi[b]).clamp_(min=0.0)
        span = torch.maximum(box_hi[b] - box_lo[a], box_hi[a] - box_lo[b])
        sure = (span * span).sum(-1) < h2 * (1.0 - _CELL_MARGIN)  # every cross pair close
        maybe = ~sure & ((gap * gap).sum(-1) <= h2 * (1.0 + _CELL_MARGIN))
        joined_a.append(a[sure])
        joined_b.append(b[sure])
        maybe_a.append(a[maybe])
        maybe_b.append(b[maybe])
    ma, mb = torch.cat(maybe_a), torch.cat(maybe_b)
    hit = _any_close_pair(pts, perm, first, count, ma, mb, tol)
    ea = torch.cat([*joined_a, ma[hit]])
    eb = torch.cat([*joined_b, mb[hit]])
    lab = _propagate(torch.arange(cells, device=dev), ea, eb)
    low = torch.full((cells,), runs * K, dtype=torch.long, device=dev).scatter_reduce_(
        0, of, flat, "amin")  # each cube's smallest node
    low = torch.full_like(low, runs * K).scatter_reduce_(0, lab, low, "amin")  # its group's
    lead = torch.arange(runs * K, device=dev)
    lead[flat] = low[lab[of]]
    return (lead - torch.arange(runs, device=dev).repeat_interleave(K) * K).view(runs, K)


def _any_close_pair(pts: torch.Tensor, perm: torch.Tensor, first: torch.Tensor,
                    count: torch.Tensor, ca: torch.Tensor, cb: torch.Tensor, tol: float
                    ) -> torch.Tensor:
    """`(len(ca),)`: whether cubes `ca[k]` and `cb[k]` hold a pair with `1 - <x_i, x_j> < tol`,
    the cross pairs enumerated in chunks of PAIR_CHUNK (memory O(PAIR_CHUNK))."""
    hit = torch.zeros(len(ca), dtype=torch.bool, device=pts.device)
    na, nb = count[ca], count[cb]
    size = na * nb
    end = torch.cumsum(size, 0)
    total = int(end[-1]) if len(end) else 0
    for lo in range(0, total, _PAIR_CHUNK):
        f = torch.arange(lo, min(total, lo + _PAIR_CHUNK), device=pts.device)
        k = torch.searchsorted(end, f, right=True)
        local = f - (end[k] - size[k])
        u = perm[first[ca[k]] + local // nb[k]]
        v = perm[first[cb[k]] + local % nb[k]]
        close = is_merged((pts[u] * pts[v]).sum(-1), tol)
        hit[k[close]] = True
    return hit


def _propagate(lead: torch.Tensor, ea: torch.Tensor, eb: torch.Tensor) -> torch.Tensor:
    """The smallest label of each connected component of the graph with edges `(ea, eb)`, by
    label propagation with pointer jumping; `lead` the labels, each its own index at first."""
    if not len(ea):
        return lead
    while True:
        low = torch.minimum(lead[ea], lead[eb])
        nxt = lead.clone()
        nxt.scatter_reduce_(0, ea, low, "amin")
        nxt.scatter_reduce_(0, eb, low, "amin")
        nxt = nxt[nxt]
        if torch.equal(nxt, lead):
            return lead
        lead = nxt


def _pair_leads(x: torch.Tensor, w: torch.Tensor, tol: float, h: float, bits: int
                ) -> torch.Tensor:
    """`sphere_leads` testing every pair of nodes in neighbouring cubes of side `h` (the path
    for tolerances at rounding level)."""
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
        close = is_merged((xf[a_f] * xf[b_f]).sum(-1), tol)
        pairs_a.append(a_f[close])
        pairs_b.append(b_f[close])
    lead = torch.arange(runs * K, device=dev)
    if pairs_a:
        lead = _propagate(lead, torch.cat(pairs_a), torch.cat(pairs_b))
    return (lead - torch.arange(runs, device=dev).repeat_interleave(K) * K).view(runs, K)


def _pack(r: torch.Tensor, q: torch.Tensor, bits: int) -> torch.Tensor:
    """One int64 per (run, cube): the run index above three `bits`-bit grid coordinates."""
    return (((r << bits | q[:, 0]) << bits | q[:, 1]) << bits) | q[:, 2]


def _offsets(device: torch.device) -> torch.Tensor:
    """The 27 offsets of a cube's neighbourhood, `(27, 3)`."""
    o = torch.tensor([-1, 0, 1], device=device)
    return torch.cartesian_prod(o, o, o)


def _half_offsets(device: torch.device) -> torch.Tensor:
    """The 62 offsets in `{-2..2}^3` after 0 in lexicographic order, `(62, 3)`: each unordered
    pair of distinct cubes up to 2 apart per coordinate once (a cube of side `h / sqrt 3`
    reaches nodes `h` away in at most 2 steps, `sqrt 3 < 2`)."""
    o = torch.arange(-2, 3, device=device)
    every = torch.cartesian_prod(o, o, o)
    return every[len(every) // 2 + 1:]
