"""The route table (c_api/routes.c): its shape, its picks, and that every route is correct on the GPU."""
import os

import pytest
import torch

import qr2_op
import whole_matrix
from conftest import ROOT, requires_cuda
from reference import check_implementation

HOPPER_SMEM = 232448

# One shape per route that the table must send there (m, n); tests on the GPU run each.
# (m, n, batch)
ROUTE_EXAMPLES = {
    "quad_columns": [(32, 32, 20), (8, 8, 3), (3, 8, 40), (1, 1, 1), (24, 24, 132), (16, 32, 1), (32, 5, 7),
                     (32, 32, 640), (17, 29, 133)],
    "quad_columns_n64": [(48, 48, 1), (64, 64, 132), (48, 48, 66), (20, 60, 1), (40, 40, 1), (47, 47, 66),
                         (39, 39, 66), (39, 39, 132), (33, 33, 1), (64, 40, 20), (5, 33, 3)],
    "warp_columns": [(32, 32, 1000), (24, 24, 1000), (8, 8, 100000), (32, 32, 641), (1, 1, 641)],
    "warp_columns_many": [(96, 32, 1000), (96, 1, 200), (64, 16, 133), (33, 32, 529), (48, 20, 500)],
    "warp_columns_many_n48": [(33, 33, 793), (64, 33, 4000), (40, 40, 800), (48, 48, 2000), (1, 40, 1000)],
    "warp_columns_many_n64": [(64, 64, 1000), (40, 50, 2000), (1, 64, 1000), (64, 64, 640), (64, 64, 529),
                              (49, 49, 529)],
    "registers": [(90, 5, 1), (96, 16, 1), (33, 16, 20), (176, 4, 132), (97, 8, 132),
                  (200, 64, 132), (256, 128, 132), (177, 100, 100), (200, 32, 40)],
    "block_columns_cluster2": [(176, 176, 40), (160, 160, 1), (97, 97, 66), (176, 97, 20), (100, 176, 5), (96, 96, 40),
                               (72, 72, 66), (72, 72, 1), (176, 72, 40), (20, 170, 1), (64, 176, 40)],
    "block_columns": [(65, 64, 1), (128, 128, 132), (71, 71, 40), (72, 72, 67), (176, 71, 1), (176, 176, 67),
                      (65, 65, 67), (96, 96, 100), (96, 96, 133), (65, 65, 640), (96, 80, 10000), (176, 176, 133),
                      (161, 161, 133), (128, 128, 640), (160, 160, 133), (176, 176, 640), (176, 48, 1000),
                      (70, 40, 500), (64, 64, 133), (33, 33, 133), (64, 64, 528), (33, 33, 528), (40, 40, 400),
                      (176, 33, 20), (70, 39, 500), (100, 39, 640), (96, 32, 1), (33, 32, 20), (39, 32, 132),
                      (97, 32, 1000), (176, 17, 1000), (176, 32, 40), (150, 20, 500), (33, 33, 792), (64, 40, 640),
                      (48, 48, 640), (48, 64, 528)],
    "registers_many_small": [(97, 16, 1000), (150, 8, 500), (200, 96, 640), (177, 32, 1000)],
    "block_columns_cluster3": [(192, 192, 1), (128, 256, 7), (193, 193, 1), (129, 256, 1), (224, 224, 1),
                               (256, 224, 1), (256, 256, 1), (225, 225, 1), (256, 256, 40), (177, 177, 66),
                               (65, 180, 40), (256, 256, 67), (177, 177, 132), (224, 224, 100), (100, 250, 132)],
    "block_columns_cluster3_tall": [(256, 129, 5), (177, 48, 66), (256, 128, 1), (200, 65, 20), (177, 176, 1),
                                    (256, 176, 40)],
    "block_columns_cluster3_many": [(256, 256, 133), (200, 256, 640), (193, 193, 1000), (225, 225, 640),
                                    (208, 208, 640), (177, 256, 2000)],
    "registers_cluster2": [(64, 200, 40), (3, 256, 1), (60, 200, 66), (64, 256, 66)],
    "on_chip": [(1000, 5, 1), (300, 8, 2), (257, 5, 1)],
    "blocked_nb64": [(512, 512, 640), (1024, 1024, 100), (672, 672, 200), (4096, 4096, 100), (600, 512, 100)],
    "blocked_nb32": [(192, 192, 1000), (177, 177, 133), (184, 184, 640), (256, 128, 200), (257, 257, 3),
                     (128, 256, 640), (256, 128, 133),
                     (1000, 300, 100), (5, 257, 1), (512, 512, 8), (1000, 300, 2), (300, 1000, 1),
                     (60000, 3, 1), (2048, 2048, 1), (9000, 40, 2), (100, 3000, 20), (1025, 1025, 16),
                     (352, 352, 40), (1024, 1024, 60), (512, 511, 640), (511, 511, 99)],
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


def test_block_routes_need_the_shared_memory_their_build_asks_for():
    """A GPU with less opt-in shared memory than a block_qr build asks for (its tile for the largest matrix of its row
    count) gets another route, not a launch that fails."""
    small = 100 * 1024  # the opt-in shared memory of e.g. an sm_89 or sm_120 GPU
    for m, n, batch in [(176, 176, 40), (256, 256, 40), (160, 160, 1), (200, 65, 20), (256, 256, 640)]:
        assert qr2_op.route_for(m, n, batch, smem_optin=HOPPER_SMEM).startswith("block_columns"), (m, n, batch)
        other = qr2_op.route_for(m, n, batch, smem_optin=small)
        assert other is not None and not other.startswith("block_columns"), (m, n, batch, other)
    for name in ("block_columns", "block_columns_cluster2"):
        assert qr2_op._route_holds(name, 176, 176, HOPPER_SMEM) and not qr2_op._route_holds(name, 176, 176, small)
        assert qr2_op._route_holds(name, 64, 64, 48 * 1024)  # the 64-row build's tile is small
    assert not qr2_op._route_holds("block_columns_cluster3", 256, 256, small)


def test_any_shape_has_a_route():
    for m, n in [(1, 1), (1, 10**6), (10**6, 1), (70000, 70000), (3, 5000)]:
        for batch in (1, 1000):
            assert qr2_op.route_for(m, n, batch) is not None


def test_readme_lists_every_route():
    readme = open(os.path.join(ROOT, "README.md")).read()
    for name, _ in qr2_op.routes():
        assert f"`{name}`" in readme, name


@requires_cuda
@pytest.mark.parametrize("route,shape", [(r, s) for r, shapes in ROUTE_EXAMPLES.items() for s in shapes], ids=str)
def test_route_passes_the_checker(route, shape):
    m, n, batch = shape
    A = torch.randn(batch, m, n, device="cuda")
    A[..., :, min(m, n) // 2] = 0.0  # a zero column: its reflector must be the identity
    H, tau = torch.ops.qr2.geqrf(A)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, f"{route} {shape}: {msg}"
    assert torch.all(tau[:, min(m, n) // 2] == 0)


@requires_cuda
@pytest.mark.parametrize("route", [name for name, _ in qr2_op.routes()])
@pytest.mark.parametrize("shape", [(37, 37, 5), (300, 200, 3), (200, 300, 3), (600, 600, 2)], ids=str)
def test_every_route_on_shapes_it_can_run(route, shape):
    """Forcing a route past the table's limits (where it can run at all) must still be correct."""
    m, n, batch = shape
    qr2_op._force_route(route)
    try:
        A = torch.randn(batch, m, n, device="cuda")
        H, tau = torch.ops.qr2.geqrf(A)
    finally:
        qr2_op._force_route(None)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, f"{route} {shape}: {msg}"


@requires_cuda
def test_on_chip_first_call_needing_just_over_48_kb_of_shared_memory():
    # 1533 x 8: the panel in shared memory plus householder_panel's static reduction scratch just over the default
    # 48 KB (a launch that failed before the scratch counted)
    whole_matrix.first_call_of_a_process("on_chip", (1, 1533, 8))


@pytest.mark.parametrize("batch, m, n", [(10, 2, 10**6), (50, 20000, 4), (4, 3, 400000)])
def test_blocked_workspace_holds_only_the_reflectors_that_exist(batch, m, n):
    """With min(m, n) below the route's 32-column panel, the workspace (V of one panel, the compact-WY scratch) is
    sized for min(m, n) columns: a 2 x 10^6 matrix asking for 32 would need 32 times its own size and could run out
    of memory where torch.geqrf does not."""
    assert qr2_op.route_for(m, n, batch) == "blocked_nb32"
    h_bytes = 4 * batch * m * n
    assert qr2_op._route_workspace_bytes("blocked_nb32", m, n, batch) <= 2.1 * h_bytes
