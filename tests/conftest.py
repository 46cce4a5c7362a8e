import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # reference.py and benchmark.py live at the top level
    sys.path.insert(0, ROOT)

import qr2_op  # noqa: E402,F401  (registers torch.ops.qr2.geqrf)

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")
DEVICES = ["cpu"] + (["cuda"] if HAS_CUDA else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param
