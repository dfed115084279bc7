"""TorchScript for the CPU runner's layers, the one place that uses it.

A scripted module runs the very same kernels as eager PyTorch (CPU fusion is off), so the numbers
do not change; what it saves is the Python interpreter between ops, about a fifth of a step of
either model on this kind of machine. ``torch.jit.script`` is deprecated, hence one small module
with a plain fallback: anything that fails to compile runs eagerly.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

# This module is the one user and knows. A process-wide filter, because models load in worker
# threads, where ``warnings.catch_warnings`` is not safe.
warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=DeprecationWarning)


def scripted(module: nn.Module) -> nn.Module:
    """``module`` compiled by TorchScript, or ``module`` itself when it cannot be compiled."""
    try:
        return torch.jit.script(module)
    except Exception as exc:  # noqa: BLE001 - TorchScript raises many kinds; eager is always right
        warnings.warn(f"running {type(module).__name__} eagerly: TorchScript failed ({exc})", stacklevel=2)
        return module
