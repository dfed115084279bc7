import os

# Tests never reach a model hub; a hub id must fail fast instead of retrying the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest

from specdec_tui.models import quantized_kernels


@pytest.fixture(autouse=True)
def isolated_from_the_user(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test reads the developer's config file, SPECDEC_* variables, themes, history or MLflow store.

    The model cache is left where it is: the real-model tests use the converted pair there.
    """
    for name in [n for n in os.environ if n.startswith("SPECDEC_")]:
        monkeypatch.delenv(name)
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))


@pytest.fixture(params=["own-kernel", "fbgemm"])
def int8_kernels(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test with int8 on this package's kernel, then on fbgemm, the fallback without it."""
    if request.param == "own-kernel" and not quantized_kernels.available():
        pytest.skip("the int8 kernel does not build here")
    monkeypatch.setattr(quantized_kernels, "_state", {"loaded": request.param == "own-kernel"})
    return request.param
