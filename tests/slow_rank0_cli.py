"""``python -m highwaynet`` with rank 0's ``torch.save`` slowed down; run by tests/test_distributed.py under torchrun.

Under torchrun only rank 0 writes a run's files, and the other ranks read some of them (the best
weights, to test them). Whether a rank reads before rank 0 has written is a race that a fast
machine may win by luck; rank 0 writing each file a second late makes a missing barrier fail every time.

On leaving, it also checks that no ``DistributedDataParallel`` wrapper outlived the process group:
one freed only at the interpreter's exit takes the group down with it there, which aborted a
process now and then (see ``leave_distributed``).
"""

import gc
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel

from highwaynet.cli import main

if os.environ.get("RANK", "0") == "0":
    _save = torch.save

    def _slow_save(*args, **kwargs):
        time.sleep(1.0)
        return _save(*args, **kwargs)

    torch.save = _slow_save

status = main()  # (the Trainer looks torch.save up at each call, so it finds the patch)
gc.disable()  # count what main() left, not what a collection now would free
left = sum(isinstance(o, DistributedDataParallel) for o in gc.get_objects())
if left:
    sys.exit(f"{left} DistributedDataParallel wrapper(s) outlived the process group")
sys.exit(status)
