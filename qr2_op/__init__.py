"""qr2: batched FP32 QR factorisation (LAPACK geqrf) for PyTorch on NVIDIA GPUs.

Importing this package loads ``libqr2.so`` (pure C and CUDA, registered through torch's stable C
ABI), after which the operators are available as ``torch.ops.qr2.geqrf``, ``torch.ops.qr2.orgqr`` and
``torch.ops.qr2.ormqr``.
"""

import ctypes
import os
import sys
from typing import NamedTuple

import torch
import torch.autograd.forward_ad as _forward_ad

__all__ = ["geqrf", "qr", "orgqr", "ormqr", "configs", "config_for", "device_of", "Device", "H200"]

_LIB_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libqr2.so")
if not os.path.exists(_LIB_PATH):
    raise ImportError(f"qr2: {_LIB_PATH} is missing; build it with `pip install -e . --no-build-isolation`")

torch.ops.load_library(_LIB_PATH)
_lib = ctypes.CDLL(_LIB_PATH)  # the handle load_library opened; used for registration and introspection
_err = ctypes.create_string_buffer(512)
if _lib.qr2_register(_err, ctypes.c_size_t(len(_err))) != 0:
    raise ImportError(_err.value.decode())

_i64, _int, _str = ctypes.c_int64, ctypes.c_int, ctypes.c_char_p
for _name, _res, _args in [
    ("qr2_config_count", _int, []),
    ("qr2_config_name", _str, [_int]),
    ("qr2_config_family", _str, [_int]),
    ("qr2_config_description", _str, [_int]),
    ("qr2_config_index_for", _int, [_i64, _i64, _i64, _int, _int, _int]),
    ("qr2_config_can_run", _int, [_str, _i64, _i64, _int, _int, _int]),
    ("qr2_config_workspace_bytes", _i64, [_str, _i64, _i64, _i64, _int, _int, _int]),
    ("qr2_config_blocked_halves", _int, [_i64, _i64, _i64, _int, _int, _int]),
    ("qr2_config_force", _int, [_str]),
]:
    getattr(_lib, _name).restype, getattr(_lib, _name).argtypes = _res, _args
_lib.qr2_note_error.restype = None
_lib.qr2_note_error.argtypes = [ctypes.c_char_p]
_lib.qr2_launch_counts.restype = None
_lib.qr2_launch_counts.argtypes = [ctypes.POINTER(ctypes.c_longlong)] * 3
_lib.qr2_launch_replay.restype = None
_lib.qr2_launch_replay.argtypes = [ctypes.c_int]
_lib.qr2_side_fork_count.restype = ctypes.c_longlong
_lib.qr2_side_fork_count.argtypes = []

_LAPACK_DTYPES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def geqrf(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """QR factorisation in LAPACK's compact Householder form; a drop-in for ``torch.geqrf``.

    Args:
        A: tensor of shape ``(*, m, n)``: any number of batch dimensions (an empty batch too), any
            ``m, n >= 0``, any strides. It is never modified.

    Returns:
        ``(H, tau)``. ``H`` has A's shape and torch.geqrf's strides: column-major inside each
        matrix, batch-major outside. On and above its diagonal it holds R; below it, the
        Householder vectors ``v_j`` (``v_j[j] = 1`` implied). ``tau`` has shape ``(*, min(m, n))``
        and ``Q = H_0 H_1 ... H_{k-1}`` with ``H_j = I - tau_j v_j v_j^T`` (LAPACK sgeqrf; ``tau_j = 0``
        where a column is already zero below the diagonal). Build Q with
        ``torch.linalg.householder_product(H, tau)``.

    float32 CUDA input runs qr2's own kernels (no host synchronisation, capturable in a CUDA
    graph, on the current stream). float64 and complex input, and every CPU input, are delegated
    to ``aten::geqrf``. Other dtypes raise RuntimeError. The operator is not differentiable:
    backward raises, as torch.geqrf's does, and so do forward-mode AD and torch.func's gradient
    transforms. ``torch.vmap`` factors all samples in one call. Inside ``torch.autocast``, float16 and
    bfloat16 input is factored in float32.
    """
    if not isinstance(A, torch.Tensor):
        raise TypeError(f"qr2.geqrf: expected a Tensor, got {type(A).__name__}")
    # (A forward-AD level opened through torch._C alone, not forward_ad.dual_level, escapes the last test.)
    if (A.layout == torch.strided and not (A.requires_grad and torch.is_grad_enabled())
            and _forward_ad._current_level < 0):
        # Nothing for autograd to record, no forward-AD level open: the below-autograd twin, which geqrf's Autograd
        # kernel would pick too, without that kernel's probe and nested dispatch (about 1.7 us per call).
        return _geqrf_impl_op(A)
    return _geqrf_op(A)


_HALF_DTYPES = (torch.float16, torch.bfloat16)
_AUTOCAST_DEVICES = {"cpu": torch._C.DispatchKey.AutocastCPU, "cuda": torch._C.DispatchKey.AutocastCUDA}


def _autocast_float32(t):
    """t in float32 where it is float16 or bfloat16 and torch.autocast is on for its device: QR needs FP32's
    precision (torch's CPU autocast runs geqrf, householder_product and ormqr in float32 too). qr2_op's
    differentiable functions cast before their derivatives see the arguments; the operators' own rule is below."""
    if (isinstance(t, torch.Tensor) and t.dtype in _HALF_DTYPES and t.device.type in _AUTOCAST_DEVICES
            and torch.is_autocast_enabled(t.device.type)):
        return t.float()
    return t


def _is_dtensor(x):
    dtensor = sys.modules.get("torch.distributed.tensor")  # loaded by whoever made a DTensor
    return dtensor is not None and isinstance(x, dtensor.DTensor)


def _contiguous_strides(sizes):
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc = acc * torch.sym_max(s, 1)
    return tuple(reversed(strides))


def _column_major_strides(shape):
    """LAPACK outputs' strides for `shape` (*, r, c), as torch lays them out: column-major per matrix, batch-major
    outside."""
    strides = list(_contiguous_strides((*shape[:-2], shape[-1], shape[-2])))
    strides[-1], strides[-2] = strides[-2], strides[-1]
    return tuple(strides)


def _geqrf_fake(A):
    torch._check(A.dim() >= 2, lambda: f"qr2.geqrf: expected a tensor of shape (*, m, n), got {A.dim()} dimension(s)")
    torch._check(
        A.dtype in _LAPACK_DTYPES,
        lambda: f"qr2.geqrf: expected a float32, float64, complex64 or complex128 tensor, got {A.dtype}",
    )
    *batch, m, n = A.shape
    k = torch.sym_min(m, n)
    H = A.new_empty_strided(tuple(A.shape), _column_major_strides(A.shape))
    tau = A.new_empty_strided((*batch, k), _contiguous_strides((*batch, k)))
    return H, tau


# qr2::geqrf and its below-autograd twin qr2::_geqrf_impl (the same C kernels; geqrf's Autograd kernel, in C,
# runs the twin) share one fake.
torch.library.register_fake("qr2::geqrf")(_geqrf_fake)
torch.library.register_fake("qr2::_geqrf_impl")(_geqrf_fake)

_geqrf_op = torch.ops.qr2.geqrf.default
_geqrf_impl_op = torch.ops.qr2._geqrf_impl.default


class _NotDifferentiable(torch.autograd.Function):
    """Gives the outputs a grad_fn whose backward raises, as torch.geqrf's does."""

    @staticmethod
    def forward(ctx, A):
        return _geqrf_impl_op(A)

    @staticmethod
    def backward(ctx, grad_h, grad_tau):
        raise RuntimeError("qr2.geqrf: the operator is not differentiable (torch.geqrf has no derivative either)")


_TRANSFORM_MESSAGE = ("qr2.geqrf: torch.func transforms that track gradients (vjp, grad, jacrev, hessian) are not "
                      "supported: the operator is not differentiable (torch.geqrf has no derivative either)")


def _geqrf_tracked(A):
    # Reached from geqrf's Autograd kernel (c_api/geqrf_op.c) only when A requires grad under grad mode. Inside a
    # torch.func transform a Function here would record its raising node at the innermost autograd level only, and
    # gradients at the outer levels would silently skip qr2 (torch's own custom ops refuse these transforms too).
    if torch._C._are_functorch_transforms_active():
        _lib.qr2_note_error(_TRANSFORM_MESSAGE.encode())  # the C kernel raises it: its nested call loses ours
        raise RuntimeError(_TRANSFORM_MESSAGE)
    return _NotDifferentiable.apply(A)


def _vmap_rule(op):
    """torch.vmap: the mapped dimension becomes the outermost batch dimension, so one call factors every sample and
    each sample's H keeps torch.geqrf's column-major strides."""

    def rule(info, in_dims, A):
        (dim,) = in_dims
        if dim is None:
            return op(A), (None, None)
        return op(A.movedim(dim, 0)), (0, 0)

    return rule


torch.library.register_vmap("qr2::geqrf", _vmap_rule(_geqrf_op))
# The twin's rule calls the public op: a BatchedTensor does not report requires_grad, so the fast path may reach the
# twin with an input that, unwrapped, requires grad; the public op's Autograd kernel then tracks it.
torch.library.register_vmap("qr2::_geqrf_impl", _vmap_rule(_geqrf_op))

_impl_lib = torch.library.Library("qr2", "IMPL")  # kept alive: dropping it would drop the kernel


def _autocast_to_float32(ops):
    """Inside torch.autocast, float16 and bfloat16 arguments of these operators on the autocast device run in float32
    (float64 and complex ones as they are), eagerly and under torch.compile (the same rule on the Python dispatcher,
    which compiling traces). One kernel per device: torch.library.register_autocast keeps a single Python kernel for
    both keys, whose device is the last one registered. Outside autocast the rule costs nothing (its keys are not
    set)."""
    excluded = torch._C.DispatchKeySet(_AUTOCAST_DEVICES["cpu"]) | torch._C.DispatchKeySet(_AUTOCAST_DEVICES["cuda"])
    for name in ops:
        op = getattr(torch.ops.qr2, name).default
        for device, key in _AUTOCAST_DEVICES.items():
            def rule(*args, op=op, device=device):
                args = [a.float() if isinstance(a, torch.Tensor) and a.dtype in _HALF_DTYPES
                        and a.device.type == device else a for a in args]
                with torch._C._ExcludeDispatchKeyGuard(excluded):
                    return op(*args)

            _impl_lib.impl(name, lambda _keyset, *args, rule=rule: rule(*args), key.name, with_keyset=True)
            op.py_impl(key)(rule)


_autocast_to_float32(("geqrf", "_geqrf_impl"))
_impl_lib.impl("_geqrf_tracked", _geqrf_tracked, "CompositeImplicitAutograd")


# Inputs the C kernels cannot inspect through the stable ABI (a nested tensor's sizes raise inside torch, which prints
# a C++ stack trace) or that no kernel of qr2 is registered for (quantized tensors reach `_geqrf_impl` on their own
# dispatch keys) get one clear error from here instead.
def _reject_nested(A):
    raise RuntimeError("qr2.geqrf: expected a dense (strided) tensor of shape (*, m, n), got a nested tensor; factor "
                       "its components (A.unbind()) or pad them into one batch (A.to_padded_tensor(0.0))")


def _reject_quantized(A):
    raise RuntimeError(f"qr2.geqrf: expected a float32, float64, complex64 or complex128 tensor, got "
                       f"{str(A.dtype).removeprefix('torch.')}")


for _op in ("geqrf", "_geqrf_impl"):
    for _key in ("AutogradNestedTensor", "NestedTensorCPU", "NestedTensorCUDA"):
        _impl_lib.impl(_op, _reject_nested, _key)
    for _key in ("QuantizedCPU", "QuantizedCUDA"):
        _impl_lib.impl(_op, _reject_quantized, _key)


class Device(NamedTuple):
    """What the policy knows of a GPU: SMs, opt-in shared memory per block (bytes), thread-block clusters."""

    sms: int
    smem_optin: int
    clusters: bool


H200 = Device(sms=132, smem_optin=232448, clusters=True)


def device_of(device=None) -> Device:
    """The policy's description of a CUDA device (an index, torch.device or None for the current one)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device() if device is None else device)
    return Device(props.multi_processor_count, props.shared_memory_per_block_optin, props.major >= 9)


def configs():
    """The kernel configurations, in the order of the README's route map: a list of (name, family, description)."""
    return [
        (_lib.qr2_config_name(i).decode(), _lib.qr2_config_family(i).decode(), _lib.qr2_config_description(i).decode())
        for i in range(_lib.qr2_config_count())
    ]


def config_for(m: int, n: int, batch: int = 1, device: Device = H200) -> str:
    """Name of the configuration the policy picks for a batch of FP32 CUDA m x n problems on `device` (a Device;
    see device_of)."""
    i = _lib.qr2_config_index_for(m, n, batch, device.sms, device.smem_optin, int(device.clusters))
    return _lib.qr2_config_name(i).decode() if i >= 0 else None


def _can_run(name: str, m: int, n: int, device: Device = H200) -> bool:
    """Tests and tools only: whether configuration `name` can run m x n on `device`, the policy aside (a forced
    configuration that cannot falls back to the policy)."""
    r = _lib.qr2_config_can_run(name.encode(), m, n, device.sms, device.smem_optin, int(device.clusters))
    if r < 0:
        raise ValueError(f"qr2: no configuration named {name!r}")
    return bool(r)


def _blocked_halves(m: int, n: int, batch: int, device: Device = H200) -> bool:
    """Tests and tools only: whether the blocked route runs a batch of m x n on `device` as two halves on two
    streams (c_api/blocked.c)."""
    return bool(_lib.qr2_config_blocked_halves(m, n, batch, device.sms, device.smem_optin, int(device.clusters)))


def _workspace_bytes(name: str, m: int, n: int, batch: int, device: Device = H200) -> int:
    """Tests only: bytes of device workspace configuration `name` asks for a batch of m x n."""
    r = _lib.qr2_config_workspace_bytes(name.encode(), m, n, batch, device.sms, device.smem_optin, int(device.clusters))
    if r < 0:
        raise ValueError(f"qr2: no configuration named {name!r}")
    return r


def _force_config(name):
    """Tests and tools only: send every FP32 CUDA shape that configuration `name` can run to it (None: back to the
    policy; "empty_kernel": one empty kernel per call, H and tau unset). Process-wide; not thread-safe against
    concurrent calls."""
    if _lib.qr2_config_force(None if name is None else name.encode()) != 0:
        raise ValueError(f"qr2: no configuration named {name!r}")


def _launch_counts():
    """Tests only: (kernel launches replayed from qr2's cached one-node CUDA graphs, graphs instantiated, replays that
    went through the driver's entry points) since the library was loaded (cuda/launch.cu)."""
    replayed, instantiated, driver = ctypes.c_longlong(), ctypes.c_longlong(), ctypes.c_longlong()
    _lib.qr2_launch_counts(ctypes.byref(replayed), ctypes.byref(instantiated), ctypes.byref(driver))
    return replayed.value, instantiated.value, driver.value


def _side_fork_count():
    """Tests only: how many times a call forked part of its work onto a side stream since the library was loaded (the
    blocked route's two halves, c_api/blocked.c; see _blocked_halves)."""
    return _lib.qr2_side_fork_count()


def _set_launch_replay(on):
    """Benchmarks only: False launches every kernel plainly, True (the default) replays cached graphs again."""
    _lib.qr2_launch_replay(1 if on else 0)


from .householder import orgqr, ormqr  # noqa: E402  (Q, and Q applied, from the reflectors)
from .linalg import qr  # noqa: E402  (Q and R, as torch.linalg.qr)

# DTensor's sharding rules, where DTensor is already loaded (otherwise `import qr2_op.distributed` registers them)
if "torch.distributed.tensor" in sys.modules:
    from . import distributed  # noqa: E402,F401
