"""The route table (c_api/routes.c): its shape, its picks, and that every route is correct on the GPU."""
import os

import pytest
import torch

import qr2_op
from conftest import ROOT, requires_cuda
from reference import check_implementation

HOPPER_SMEM = 232448

# One shape per route that the table must send there (m, n); tests on the GPU run each.
ROUTE_EXAMPLES = {
    "on_chip": [(8, 8), (100, 5), (3, 8), (1, 1)],
    "blocked_nb32": [(32, 32), (176, 176), (352, 352), (512, 512), (1000, 300), (300, 1000), (60000, 3),
                     (2048, 2048), (9000, 40), (100, 3000)],
}


def test_route_names_are_unique_and_described():
    table = qr2_op.routes()
    names = [name for name, _ in table]
    assert len(names) == len(set(names)) >= 2
    assert all(desc for _, desc in table)


def test_every_route_has_examples_here():
    assert set(ROUTE_EXAMPLES) == {name for name, _ in qr2_op.routes()}


@pytest.mark.parametrize("route,shape", [(r, s) for r, shapes in ROUTE_EXAMPLES.items() for s in shapes], ids=str)
def test_route_pick(route, shape):
    assert qr2_op.route_for(*shape, smem_optin=HOPPER_SMEM) == route


def test_any_shape_has_a_route():
    for m, n in [(1, 1), (1, 10**6), (10**6, 1), (70000, 70000), (3, 5000)]:
        assert qr2_op.route_for(m, n) is not None


def test_readme_lists_every_route():
    readme = open(os.path.join(ROOT, "README.md")).read()
    for name, _ in qr2_op.routes():
        assert f"`{name}`" in readme, name


@requires_cuda
@pytest.mark.parametrize("route,shape", [(r, s) for r, shapes in ROUTE_EXAMPLES.items() for s in shapes], ids=str)
def test_route_passes_the_checker(route, shape):
    m, n = shape
    batch = 3 if m * n <= 2 * 10**6 else 1
    A = torch.randn(batch, m, n, device="cuda")
    A[..., :, min(m, n) // 2] = 0.0  # a zero column: its reflector must be the identity
    H, tau = torch.ops.qr2.geqrf(A)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, f"{route} {shape}: {msg}"
    assert torch.all(tau[:, min(m, n) // 2] == 0)
