"""DTensor sharding rules for qr2's operators: a batch spread over devices is factored where it lies.

``import qr2_op.distributed`` registers them (``import qr2_op`` does so itself when ``torch.distributed.tensor`` is
already loaded; importing it costs about half a second, so qr2 does not load it for everybody). Each matrix must be
whole on one rank, so the placements qr2's operators (geqrf, orgqr, ormqr) run with are a shard of one batch dimension
(every argument and output sharded on that dimension, each rank working on its own matrices, no communication) or
everything replicated. DTensor redistributes an input sharded otherwise (across a matrix's rows or columns) to one of them.
``qr2_op.qr`` of a DTensor decomposes each rank's own matrices the same way (``qr_where_it_lies``), and so do
``qr2_op.orgqr`` and ``ormqr`` where a derivative may be needed (``apply_where_it_lies``): qr2's derivatives then run
on each rank's local tensors, which DTensor's operators could not all do.
"""
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
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


def _orgqr_placements(A, tau):
    """Q has A's batch dimensions: every argument and Q sharded on one batch dimension, or all replicated."""
    strategies = [([Replicate()], [Replicate(), Replicate()])]
    for dim in range(A.ndim - 2):
        strategies.append(([Shard(dim)], [Shard(dim), Shard(dim)]))
    return strategies


def _ormqr_placements(A, tau, C, left=True, transpose=False):
    """As orgqr's, with C sharded (or replicated) like A: left and transpose are not placements."""
    strategies = [([Replicate()], [Replicate(), Replicate(), Replicate(), None, None])]
    for dim in range(A.ndim - 2):
        strategies.append(([Shard(dim)], [Shard(dim), Shard(dim), Shard(dim), None, None]))
    return strategies


register_sharding([torch.ops.qr2.orgqr.default, torch.ops.qr2._orgqr_impl.default])(_orgqr_placements)
register_sharding([torch.ops.qr2.ormqr.default, torch.ops.qr2._ormqr_impl.default])(_ormqr_placements)


def _whole(local, like: DTensor, shape, placements):
    return DTensor.from_local(local, like.device_mesh, placements, run_check=False, shape=torch.Size(shape),
                              stride=qr2_op._column_major_strides(shape) if len(shape) >= 2 else (1,))


def apply_where_it_lies(op, tensors, out_shape):
    """op(*local tensors) on each rank, for DTensors that share one placement: a shard of a batch dimension (of the
    first, the reflectors A) or replication; any other placements are first redistributed to replicated. The result
    (shape out_shape, column-major per matrix) keeps that placement. Differentiable through to_local and from_local."""
    A = tensors[0]
    placements = list(A.placements)
    batch_dims = A.ndim - 2
    if not (all(list(t.placements) == placements for t in tensors) and all(
            isinstance(p, Replicate) or (isinstance(p, Shard) and p.dim % A.ndim < batch_dims) for p in placements)):
        placements = [Replicate()] * A.device_mesh.ndim
        tensors = [t.redistribute(A.device_mesh, placements) for t in tensors]
    return _whole(op(*(t.to_local() for t in tensors)), A, out_shape, placements)


def qr_where_it_lies(A: DTensor, mode: str):
    """qr2_op.qr of a DTensor: where A is sharded on batch dimensions (or replicated) each rank decomposes its own
    matrices with no communication, and Q and R come back with A's placements; a placement across a matrix's rows or
    columns is first redistributed to replicated. mode "r" returns Q as an empty replicated DTensor."""
    from .linalg import qr

    batch_dims = A.ndim - 2
    keep = [p if isinstance(p, Replicate) or (isinstance(p, Shard) and p.dim % A.ndim < batch_dims) else Replicate()
            for p in A.placements]
    if keep != list(A.placements):
        A = A.redistribute(A.device_mesh, keep)
    Q, R = qr(A.to_local(), mode)
    *batch, m, n = A.shape
    rows = m if mode == "complete" else min(m, n)
    R = _whole(R, A, (*batch, rows, n), keep)
    if mode == "r":
        return _whole(Q, A, (0,), [Replicate()] * A.device_mesh.ndim), R
    return _whole(Q, A, (*batch, m, m if mode == "complete" else min(m, n)), keep), R
