"""DTensor: a batch sharded over ranks is factored where it lies (qr2_op/distributed.py), by qr2.geqrf and qr2_op.qr. Two processes on the CPU
(gloo), so that it runs everywhere (qr2 on the CPU delegates to aten::geqrf; the sharding rules are the same for every
device), and one process on one GPU or two on two GPUs (NCCL, qr2's kernels) where a machine has them. Each rank's
shard must equal its own matrices factored alone; on the CPU the gathered whole must equal the whole batch factored at
once (on GPUs a smaller batch may take another configuration, so only the shards are compared bit for bit)."""
import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo")

def _same(got, want):
    return torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def _check_sharded(mesh, A, dim, factor_alone):
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import qr2_op

    dA = distribute_tensor(A, mesh, [Shard(dim)])
    for factor in (torch.ops.qr2.geqrf, qr2_op.geqrf):
        H, tau = factor(dA)
        assert isinstance(H, DTensor) and isinstance(tau, DTensor)
        assert H.placements == (Shard(dim),) and tau.placements == (Shard(dim),), (H.placements, tau.placements)
        assert H.shape == A.shape and tau.shape == A.shape[:-2] + (min(A.shape[-2:]),)
        assert _same((H.to_local(), tau.to_local()), factor_alone(dA.to_local())), "a rank's shard"
        if A.device.type == "cpu":
            assert _same((H.full_tensor(), tau.full_tensor()), torch.geqrf(A)), "the gathered whole"


def _check_qr(mesh, A, placement):
    """qr2_op.qr of a DTensor: Q and R keep a batch shard (or replication) and equal each rank's matrices decomposed
    alone; on the CPU the gathered whole equals torch.linalg.qr bit for bit. A placement across rows is redistributed."""
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    import qr2_op

    dA = distribute_tensor(A, mesh, [placement])
    kept = placement if isinstance(placement, Replicate) or placement.dim < A.ndim - 2 else Replicate()
    for mode in ("reduced", "complete", "r"):
        Q, R = qr2_op.qr(dA, mode)
        assert isinstance(Q, DTensor) and isinstance(R, DTensor)
        assert R.placements == (kept,) and Q.placements == ((kept,) if mode != "r" else (Replicate(),))
        local = qr2_op.qr(dA.redistribute(mesh, [kept]).to_local(), mode)
        assert torch.equal(R.to_local(), local[1]) and torch.equal(Q.to_local(), local[0]), "a rank's shard"
        if A.device.type == "cpu":
            Qr, Rr = torch.linalg.qr(A, mode=mode)
            assert torch.equal(R.full_tensor(), Rr) and torch.equal(Q.full_tensor(), Qr), "the gathered whole"
            assert R.shape == Rr.shape and R.stride() == Rr.stride() and Q.stride() == Qr.stride()


def _check_householder(mesh, A, C):
    """qr2.orgqr and qr2.ormqr of batch-sharded reflectors: each rank works on its own matrices, outputs sharded alike
    (bit for bit torch's on the CPU, where qr2 delegates to it)."""
    from torch.distributed.tensor import DTensor, Shard, distribute_tensor

    import qr2_op

    H, tau = torch.geqrf(A)
    dH, dtau, dC = (distribute_tensor(t, mesh, [Shard(0)]) for t in (H, tau, C))
    Q = qr2_op.orgqr(dH, dtau)
    X = qr2_op.ormqr(dH, dtau, dC, False, True)
    assert isinstance(Q, DTensor) and Q.placements == (Shard(0),) and X.placements == (Shard(0),)
    assert torch.equal(Q.to_local(), qr2_op.orgqr(dH.to_local(), dtau.to_local())), "a rank's Q"
    assert torch.equal(X.to_local(), qr2_op.ormqr(dH.to_local(), dtau.to_local(), dC.to_local(), False, True))
    if A.device.type == "cpu":
        assert torch.equal(Q.full_tensor(), torch.linalg.householder_product(H, tau))
        assert torch.equal(X.full_tensor(), torch.ormqr(H, tau, C, False, True))


def _check_gradients(mesh, A, C):
    """Derivatives through DTensors: qr2_op.qr, orgqr and ormqr of batch-sharded arguments give each rank the
    gradients of its own matrices, sharded alike where the batch splits evenly (unevenly, DTensor's backward may
    return them replicated; the values are the same); with C split across its rows (redistributed to replicated) the
    gradients are still the whole batch's."""
    from torch.distributed.tensor import Shard, distribute_tensor

    import qr2_op

    def grads(f, tensors, placements):
        args = [distribute_tensor(t, mesh, [p]).requires_grad_() for t, p in zip(tensors, placements)]
        f(*args).sin().sum().backward()
        return args

    def local_grads(f, tensors):
        args = [t.clone().requires_grad_() for t in tensors]
        f(*args).sin().sum().backward()
        return [a.grad for a in args]

    H, tau = torch.geqrf(A)
    for args in ((distribute_tensor(H, mesh, [Shard(0)]).requires_grad_(), tau),
                 (H.clone().requires_grad_(), distribute_tensor(tau, mesh, [Shard(0)]))):
        with pytest.raises(RuntimeError, match="qr2.orgqr: expected every tensor argument to be a DTensor where one"):
            qr2_op.orgqr(*args)
    cases = [(lambda a: sum(x.sum() for x in qr2_op.qr(a)), (A,), [Shard(0)]),
             (qr2_op.orgqr, (H, tau), [Shard(0)] * 2),
             (lambda h, t, c: qr2_op.ormqr(h, t, c, False, True), (H, tau, C), [Shard(0)] * 3),
             (lambda h, t, c: qr2_op.ormqr(h, t, c, False, True), (H, tau, C), [Shard(0), Shard(0), Shard(1)])]
    for f, tensors, placements in cases:
        args = grads(f, tensors, placements)
        if all(p == Shard(0) for p in placements) and A.shape[0] % mesh.size() == 0:  # the gradients lie there too
            assert all(a.grad.placements == (Shard(0),) for a in args), [a.grad.placements for a in args]
        if A.device.type == "cpu":  # to FP32 rounding: BLAS may round a product of a shard and of the whole apart
            for a, want in zip(args, local_grads(f, tensors)):
                torch.testing.assert_close(a.grad.full_tensor(), want)
        elif placements[-1] == Shard(0):  # each rank's own matrices, decomposed alone
            for a, want in zip(args, local_grads(f, [a.to_local().detach() for a in args])):
                torch.testing.assert_close(a.grad.to_local(), want)


def _worker(rank, world, port, backend):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    device = "cpu" if backend == "gloo" else "cuda"
    if device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # LAPACK's threads may change its rounding from call to call: one, for bits to compare
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor

        import qr2_op
        import qr2_op.distributed  # noqa: F401

        mesh = init_device_mesh(device, (world,))
        alone = torch.geqrf if device == "cpu" else torch.ops.qr2.geqrf
        g = torch.Generator().manual_seed(0)

        def randn(*shape):
            return torch.randn(*shape, generator=g).to(device)

        _check_sharded(mesh, randn(6, 40, 30), 0, alone)
        _check_sharded(mesh, randn(5, 12, 12), 0, alone)  # uneven: 3 and 2 matrices
        _check_sharded(mesh, randn(2, 5, 20, 10), 1, alone)  # a shard of the inner batch dimension
        _check_sharded(mesh, randn(4, 600, 600), 0, alone)  # the blocked route on a GPU
        A = randn(4, 30, 20)
        H, tau = qr2_op.geqrf(distribute_tensor(A, mesh, [Replicate()]))
        assert H.placements == (Replicate(),) and tau.placements == (Replicate(),)
        assert _same((H.to_local(), tau.to_local()), alone(A)), "replicated"
        # split across a matrix's rows: DTensor redistributes it to a placement that keeps matrices whole
        H, tau = qr2_op.geqrf(distribute_tensor(A, mesh, [Shard(1)]))
        assert all(not (isinstance(p, Shard) and p.dim >= 1) for p in H.placements), H.placements
        if device == "cpu":
            assert _same((H.full_tensor(), tau.full_tensor()), torch.geqrf(A)), "rows sharded"
        _check_qr(mesh, randn(5, 40, 30), Shard(0))
        _check_qr(mesh, randn(4, 20, 30), Replicate())
        _check_qr(mesh, randn(4, 40, 30), Shard(1))
        _check_householder(mesh, randn(6, 40, 30), randn(6, 9, 40))
        _check_gradients(mesh, randn(4, 12, 7), randn(4, 5, 12))
        _check_gradients(mesh, randn(5, 12, 7), randn(5, 5, 12))  # uneven: 3 and 2 matrices
    finally:
        dist.destroy_process_group()
    # Every check passed. Leave without the interpreter's teardown: in about one full-suite run in three, a rank that
    # had finished (and destroyed its group) aborted there, in C++ ("terminate called without an active exception").
    sys.stderr.flush()
    os._exit(0)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(sys.platform != "linux", reason="spawns processes with a local process group")
@pytest.mark.parametrize("backend,world", [("gloo", 2), ("nccl", 1), ("nccl", 2)])
def test_batch_sharded_over_processes(backend, world):
    if backend == "nccl" and not (dist.is_nccl_available() and torch.cuda.device_count() >= world):
        pytest.skip(f"needs NCCL and {world} CUDA GPU(s)")
    mp.spawn(_worker, args=(world, _free_port(), backend), nprocs=world, join=True)
