"""The hang feature's public Python API: `record_collectives()` records every torch.distributed
call in this process from now on (the recorder itself is worker-side, `worker_recorder.py`)."""

from rankscope.hang.worker_recorder import record_collectives

__all__ = ["record_collectives"]
