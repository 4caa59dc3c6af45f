"""Cross-rank tensor consistency: fingerprints where tensors live, compared across ranks.

Importing this package does not import torch; the first call does.
"""

from rankscope.consistency.analysis import (
    ConsistencyReport,
    TensorCheck,
    TensorSpread,
    TensorStatus,
)
from rankscope.consistency.api import inspect_distributed_tensor, verify_distributed_tensors

__all__ = [
    "ConsistencyReport",
    "TensorCheck",
    "TensorSpread",
    "TensorStatus",
    "inspect_distributed_tensor",
    "verify_distributed_tensors",
]
