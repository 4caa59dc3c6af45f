"""Cross-rank tensor consistency: fingerprints where tensors live, compared across ranks.

Importing this package does not import torch; the first call does. Modules: `api` (the two
entry points), `analysis` (the comparison), `render` (the report as text), `model` (the
records ranks exchange, the report and the enums), `fingerprint` (hashes and summaries where
a tensor lives), `torch_hash` and `cpu_hash`/`numba_kernel` (the hash with torch ops, and with
numba on the CPU), `flatten` and `worker_transport` (the exchange between ranks).
"""

from rankscope.consistency import render as _render  # noqa: F401  (sets the reports' text)
from rankscope.consistency.api import inspect_distributed_tensor, verify_distributed_tensors
from rankscope.consistency.model import ConsistencyReport, TensorCheck, TensorSpread, TensorStatus

__all__ = [
    "ConsistencyReport",
    "TensorCheck",
    "TensorSpread",
    "TensorStatus",
    "inspect_distributed_tensor",
    "verify_distributed_tensors",
]
