import os

# Tests never reach a model hub; a hub id must fail fast instead of retrying the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest

from specdec_tui.models import quantized_kernels


@pytest.fixture(params=["own-kernel", "fbgemm"])
def int8_kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with int8 on this package's kernel, then on fbgemm, the fallback without it."""
    if request.param == "own-kernel" and not quantized_kernels.available():
        pytest.skip("the int8 kernel does not build here")
    monkeypatch.setattr(quantized_kernels, "_state", {"loaded": request.param == "own-kernel"})
    return request.param
