"""The configurations (c_api/configs.c) and the policy that picks them (c_api/policy.c): the picks on an H200 and on
devices qr2 has not run on, the README's route map, and every configuration correct on the GPU."""
import os
import re

import pytest
import torch

import qr2_op
import whole_matrix
from conftest import ROOT, requires_cuda
from qr2_op import H200, Device
from reference import check_implementation

# Shapes (m, n, batch) the policy must send to each configuration on an H200; the GPU tests run each.
CONFIG_EXAMPLES = {
    "quad": [(32, 32, 20), (8, 8, 3), (3, 8, 40), (1, 1, 1), (24, 24, 132), (16, 32, 1), (32, 5, 7), (32, 32, 640),
        (17, 29, 133), (48, 48, 1), (64, 64, 132), (48, 48, 66), (20, 60, 1), (40, 40, 1), (47, 47, 66),
        (39, 39, 66), (39, 39, 132), (33, 33, 1), (64, 40, 20), (5, 33, 3)],
    "warp": [(32, 32, 1000), (24, 24, 1000), (8, 8, 100000), (32, 32, 641), (1, 1, 641), (96, 32, 1000),
        (96, 1, 200), (64, 16, 133), (33, 32, 529), (48, 20, 500), (33, 33, 793), (64, 33, 4000), (40, 40, 800),
        (48, 48, 2000), (1, 40, 1000), (64, 64, 1000), (40, 50, 2000), (1, 64, 1000), (64, 64, 640), (64, 64, 529),
        (49, 49, 529)],
    "builder": [(65, 64, 1), (128, 128, 132), (71, 71, 40), (72, 72, 67), (176, 71, 1), (176, 176, 67), (65, 65, 67),
        (96, 96, 100), (96, 96, 133), (65, 65, 640), (96, 80, 10000), (176, 176, 133), (161, 161, 133),
        (128, 128, 640), (160, 160, 133), (176, 176, 640), (176, 48, 1000), (70, 40, 500), (64, 64, 133),
        (33, 33, 133), (64, 64, 528), (33, 33, 528), (40, 40, 400), (176, 33, 20), (70, 39, 500), (100, 39, 640),
        (96, 32, 1), (33, 32, 20), (39, 32, 132), (97, 32, 1000), (176, 17, 1000), (176, 32, 40), (150, 20, 500),
        (33, 33, 792), (64, 40, 640), (48, 48, 640), (48, 64, 528)],
    "builder_cluster2": [(176, 176, 40), (160, 160, 1), (97, 97, 66), (176, 97, 20), (100, 176, 5), (96, 96, 40),
        (72, 72, 66), (72, 72, 1), (176, 72, 40), (20, 170, 1), (64, 176, 40)],
    "builder_cluster3": [(192, 192, 1), (128, 256, 7), (193, 193, 1), (129, 256, 1), (224, 224, 1), (256, 224, 1),
        (256, 256, 1), (225, 225, 1), (256, 256, 40), (177, 177, 66), (65, 180, 40), (256, 256, 67), (177, 177, 132),
        (224, 224, 100), (100, 250, 132), (256, 129, 5), (177, 48, 66), (256, 128, 1), (200, 65, 20), (177, 176, 1),
        (256, 176, 40), (256, 256, 133), (200, 256, 640), (193, 193, 1000), (225, 225, 640), (208, 208, 640),
        (177, 256, 2000)],
    "registers": [(90, 5, 1), (96, 16, 1), (33, 16, 20), (176, 4, 132), (97, 8, 132), (200, 64, 132),
        (256, 128, 132), (177, 100, 100), (200, 32, 40), (97, 16, 1000), (150, 8, 500), (200, 96, 640),
        (177, 32, 1000)],
    "registers_cluster2": [(64, 200, 40), (3, 256, 1), (60, 200, 66), (64, 256, 66)],
    "shared_memory": [(1000, 5, 1), (300, 8, 2), (257, 5, 1)],
    "blocked_nb64": [(1024, 1024, 200), (768, 768, 400), (4096, 4096, 100), (1536, 1536, 100), (2048, 2048, 48),
        (800, 800, 320), (768, 1024, 300), (1024, 1024, 189)],
    "blocked_cholqr_nb32_lookahead": [(4096, 4096, 2), (4096, 4096, 1), (2048, 2048, 1), (4095, 4096, 2),
        (3000, 3000, 1), (2049, 2049, 2)],
    "blocked_cholqr_nb32": [(1000, 300, 2), (5000, 1000, 1), (4200, 200, 2), (1025, 1025, 16),
        (5000, 4096, 2), (4096, 6000, 1), (640, 640, 32), (2048, 2048, 16), (2048, 2047, 2), (2047, 2048, 2),
        (2048, 2048, 8), (4096, 4096, 3),
        (1000, 1500, 2), (1500, 1000, 4),
        (1024, 1024, 60), (1024, 1024, 100), (768, 768, 100), (1536, 1536, 64), (2048, 2048, 33), (600, 512, 200),
        (1000, 300, 100), (640, 640, 300), (768, 768, 200), (1024, 1024, 188), (9000, 40, 2), (100000, 256, 1),
        (20000, 256, 1), (50000, 64, 4), (9000, 2000, 2)],
    "blocked_nb32": [(192, 192, 1000), (177, 177, 133), (184, 184, 640), (256, 128, 200), (257, 257, 3),
        (128, 256, 640), (256, 128, 133), (5, 257, 1), (512, 512, 8), (300, 1000, 1), (100, 3000, 20), (60000, 3, 1),
        (352, 352, 40), (512, 511, 640), (511, 511, 99), (512, 512, 100),
        (512, 512, 640), (512, 512, 1000), (640, 640, 640), (600, 512, 1000), (700, 700, 500), (10000, 64, 300),
        (20000, 256, 5)],
}

NAMES = [name for name, _, _ in qr2_op.configs()]
CLUSTER_CONFIGS = {"builder_cluster2", "builder_cluster3", "registers_cluster2"}

# Devices qr2 has not run on, described as the policy sees them: 114 SMs (H100 PCIe), 132 (H100 SXM, H200), 148
# (B200), with Hopper's opt-in shared memory; one with less shared memory and no clusters (an sm_89-class GPU).
DEVICES = [Device(114, 232448, True), H200, Device(148, 232448, True), Device(128, 101376, False)]
GRID = [(m, n, b) for m in (1, 8, 32, 48, 64, 96, 100, 176, 200, 256, 300, 512, 1024, 5000)
        for n in (1, 8, 16, 32, 40, 64, 72, 100, 176, 200, 256, 300, 512, 1024)
        for b in (1, 20, 57, 66, 74, 100, 114, 132, 148, 300, 600, 800, 1000)]


def test_configuration_names_are_unique_and_described():
    table = qr2_op.configs()
    assert len(NAMES) == len(set(NAMES)) >= 2
    assert all(family and desc for _, family, desc in table)
    assert "empty_kernel" not in NAMES  # measurement only, never picked


def test_every_configuration_has_examples_here():
    assert set(CONFIG_EXAMPLES) == set(NAMES)


@pytest.mark.parametrize("config,shape", [(c, s) for c, shapes in CONFIG_EXAMPLES.items() for s in shapes], ids=str)
def test_pick_on_an_h200(config, shape):
    assert qr2_op.config_for(*shape, device=H200) == config


@pytest.mark.parametrize("device", DEVICES, ids=lambda d: f"{d.sms}sms-{d.smem_optin // 1024}kb-clusters{d.clusters:d}")
def test_every_pick_runs_on_its_device(device):
    """No pick asks for clusters, shared memory or registers the device lacks: the picked configuration can run the
    shape there, and a device without clusters gets none."""
    for m, n, b in GRID:
        name = qr2_op.config_for(m, n, b, device)
        assert name in NAMES, (m, n, b)
        assert qr2_op._can_run(name, m, n, device), (m, n, b, name)
        if not device.clusters:
            assert name not in CLUSTER_CONFIGS, (m, n, b, name)


def test_cholqr_panels_only_where_the_device_and_the_panels_allow_them():
    """The CholeskyQR configuration is picked only where some panel is one its kernel holds: not on a device without
    clusters or with too little shared memory, and not where every panel is taller than 4096 rows."""
    assert qr2_op.config_for(2048, 2048, 8, H200) == "blocked_cholqr_nb32"
    assert qr2_op.config_for(2048, 2048, 8, Device(128, 101376, False)) == "blocked_nb32"
    assert qr2_op.config_for(2048, 2048, 8, Device(132, 100 * 1024, True)) == "blocked_nb32"
    assert qr2_op.config_for(8192, 1024, 1, H200) == "blocked_nb32"  # every panel has 7200 rows or more
    assert qr2_op.config_for(8192, 4200, 1, H200) == "blocked_cholqr_nb32"  # the last ones have 4096 or fewer


def test_batch_thresholds_scale_with_the_sms():
    """Thresholds are waves of the device's SMs: one 2-block cluster per SM pair, one block per SM, and the crossovers
    measured at a batch on an H200 scaled by SM count."""
    for device in DEVICES[:3]:
        half, wave = device.sms // 2, device.sms
        assert qr2_op.config_for(176, 176, half, device) == "builder_cluster2"
        assert qr2_op.config_for(176, 176, half + 1, device) == "builder"
        assert qr2_op.config_for(48, 48, wave, device) == "quad"
        assert qr2_op.config_for(48, 48, wave + 1, device) == "builder"
        assert qr2_op.config_for(32, 48, 6 * wave + 1, device) == "warp"
        quad_most = 640 * device.sms // 132
        assert qr2_op.config_for(32, 32, quad_most, device) == "quad"
        assert qr2_op.config_for(32, 32, quad_most + 1, device) == "warp"


def test_every_configuration_is_reachable_on_every_hopper_or_later_device():
    for device in DEVICES[:3]:
        picked = {qr2_op.config_for(m, n, b, device) for m, n, b in GRID + [(512, 512, 640), (4096, 4096, 2)]}
        assert picked == set(NAMES), set(NAMES) - picked


def test_builder_needs_the_shared_memory_its_build_asks_for():
    """A GPU with less opt-in shared memory than a builder build asks for (its tile for the largest matrix of its row
    count) gets another configuration, not a launch that fails."""
    small = Device(132, 100 * 1024, True)  # the opt-in shared memory of e.g. an sm_89 or sm_120 GPU
    for m, n, batch in [(176, 176, 40), (256, 256, 40), (160, 160, 1), (200, 65, 20), (256, 256, 640)]:
        assert qr2_op.config_for(m, n, batch, H200).startswith("builder"), (m, n, batch)
        other = qr2_op.config_for(m, n, batch, small)
        assert other is not None and not other.startswith("builder"), (m, n, batch, other)
    for name in ("builder", "builder_cluster2"):
        assert qr2_op._can_run(name, 176, 176, H200) and not qr2_op._can_run(name, 176, 176, small)
        assert qr2_op._can_run(name, 64, 64, Device(132, 48 * 1024, True))  # the 64-row build's tile is small
    assert not qr2_op._can_run("builder_cluster3", 256, 256, small)


def test_any_shape_has_a_configuration():
    for m, n in [(1, 1), (1, 10**6), (10**6, 1), (70000, 70000), (3, 5000)]:
        for batch in (1, 1000):
            assert qr2_op.config_for(m, n, batch) is not None


def test_readme_route_map_lists_every_configuration_with_its_family():
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme.split("## Route map", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (\w+)", section, flags=re.M)
    assert sorted(name for name, _ in rows) == sorted(NAMES)
    families = {name: family for name, family, _ in qr2_op.configs()}
    for name, family in rows:
        assert family == families[name] or (families[name] == "blocked" and family == "blocked"), (name, family)


@pytest.mark.parametrize("batch, m, n", [(10, 2, 10**6), (50, 20000, 4), (4, 3, 400000)])
def test_blocked_workspace_holds_only_the_reflectors_that_exist(batch, m, n):
    """With min(m, n) below the 32-column panel, the workspace (V of one panel, the update's scratch) is sized for
    min(m, n) columns: a 2 x 10^6 matrix asking for 32 would need 32 times its own size and could run out of memory
    where torch.geqrf does not."""
    assert qr2_op.config_for(m, n, batch) == "blocked_nb32"
    h_bytes = 4 * batch * m * n
    assert qr2_op._workspace_bytes("blocked_nb32", m, n, batch) <= 2.1 * h_bytes


# (batch, m, n) and whether the blocked route runs the batch as two halves on two streams on an H200 (c_api/blocked.c):
# each half needs 4 waves of the first update's 64-column strips where the register panel holds the rows, 2 beyond.
HALVES = [((640, 512, 512), True), ((160, 512, 512), True), ((264, 300, 300), True), ((60, 1024, 1024), True),
          ((60, 768, 768), True), ((120, 352, 352), False), ((80, 512, 512), False), ((40, 352, 352), False),
          ((30, 1024, 1024), False), ((8, 2048, 2048), False), ((2, 4096, 4096), False),
          ((16, 2048, 2048), False), ((35, 1024, 1024), True),
          # halves of fewer matrices than SMs whose updates over 4096 rows may call cuBLAS; the tall panel
          ((200, 6000, 600), False), ((300, 10000, 64), False),
          # fewer than four panels: wide and thin matrices
          ((2, 32, 40000), False), ((10, 2, 10**6), False), ((2000, 5000, 127), False), ((2000, 5000, 128), True),
          # halves of one matrix
          ((3, 200, 40000), False), ((4, 200, 40000), True)]


@pytest.mark.parametrize("shape, halves", HALVES, ids=str)
def test_large_batches_run_as_two_halves(shape, halves):
    batch, m, n = shape
    assert qr2_op._blocked_halves(m, n, batch) == halves


def test_the_halves_rule_never_overflows():
    """half x strips would pass 2^63 here: the rule divides instead."""
    assert qr2_op._blocked_halves(1024, 2**31 - 1, 2**62) and qr2_op._blocked_halves(1024, 2**62, 2**40)
    assert not qr2_op._blocked_halves(1024, 1024, 2**40, Device(0, 232448, True))


def test_two_halves_scale_with_the_sms():
    """The same batch that splits on an H200 stays whole on a device with twice its SMs."""
    assert qr2_op._blocked_halves(1024, 1024, 60)
    assert not qr2_op._blocked_halves(1024, 1024, 60, Device(264, 232448, True))


@requires_cuda
def test_the_device_description_matches_torch():
    d = qr2_op.device_of()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    assert d.sms == props.multi_processor_count and d.smem_optin >= 48 * 1024


@requires_cuda
@pytest.mark.parametrize("config,shape", [(c, s) for c, shapes in CONFIG_EXAMPLES.items() for s in shapes], ids=str)
def test_picked_configuration_passes_the_checker(config, shape):
    m, n, batch = shape
    A = torch.randn(batch, m, n, device="cuda")
    A[..., :, min(m, n) // 2] = 0.0  # a zero column: its reflector must be the identity
    H, tau = torch.ops.qr2.geqrf(A)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, f"{config} {shape}: {msg}"
    assert torch.all(tau[:, min(m, n) // 2] == 0)


@requires_cuda
@pytest.mark.parametrize("config", NAMES)
@pytest.mark.parametrize("shape", [(37, 37, 5), (300, 200, 3), (200, 300, 3), (600, 600, 2)], ids=str)
def test_every_configuration_on_shapes_it_can_run(config, shape):
    """Forcing a configuration past the policy's preferences (where it can run at all) must still be correct."""
    m, n, batch = shape
    qr2_op._force_config(config)
    try:
        A = torch.randn(batch, m, n, device="cuda")
        H, tau = torch.ops.qr2.geqrf(A)
    finally:
        qr2_op._force_config(None)
    ok, msg = check_implementation(A, (H, tau))
    assert ok, f"{config} {shape}: {msg}"
