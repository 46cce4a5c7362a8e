"""DTensor sharding rules for qr2's operators: a batch spread over devices is factored where it lies.

``import qr2_op.distributed`` registers them (``import qr2_op`` does so itself when ``torch.distributed.tensor`` is
already loaded; importing it costs about half a second, so qr2 does not load it for everybody). Each matrix must be
whole on one rank, so the placements qr2's geqrf runs with are a shard of one batch dimension (H and tau sharded on
that dimension, each rank factoring its own matrices, no communication) or the input replicated (both outputs
replicated). DTensor redistributes an input sharded otherwise (across a matrix's rows or columns) to one of them.
"""
import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

import qr2_op  # noqa: F401  (the operators must exist)


def _geqrf_placements(A):
    """(output placements, input placements) for A of shape (*, m, n): H has A's batch dimensions, tau too."""
    strategies = [([Replicate(), Replicate()], [Replicate()])]
    for dim in range(A.ndim - 2):
        strategies.append(([Shard(dim), Shard(dim)], [Shard(dim)]))
    return strategies


# the public operator and the twin that qr2_op.geqrf calls where autograd has nothing to record
register_sharding([torch.ops.qr2.geqrf.default, torch.ops.qr2._geqrf_impl.default])(_geqrf_placements)
