"""``highwaynet`` as a user runs it, with every file write slowed, and optionally a SIGKILL in the
middle of one: for tests/test_run_folder.py's kill loop.

    python kill_worker.py KILL_AT ARGS...

Each ``torch.save`` (model.pt, checkpoint.pt) and each text write of the run folder is written in
several pieces with a pause between them, so that a kill from outside lands in one often; with
KILL_AT = k > 0 the process kills itself halfway through its k-th such write (0: never).
"""

import os
import signal
import sys
import time
from pathlib import Path

import torch

from highwaynet.cli import main

kill_at = int(sys.argv[1])
writes = 0


def slowly(path: Path, data: bytes) -> None:
    global writes
    writes += 1
    pieces = [data[i:i + max(1, len(data) // 4)] for i in range(0, len(data), max(1, len(data) // 4))]
    with open(path, "wb") as f:
        for i, piece in enumerate(pieces):
            f.write(piece)
            f.flush()
            time.sleep(0.01)
            if writes == kill_at and i == len(pieces) // 2:
                os.kill(os.getpid(), signal.SIGKILL)


real_save = torch.save


def save(obj, f, *args, **kwargs):
    import io

    buffer = io.BytesIO()
    real_save(obj, buffer, *args, **kwargs)
    slowly(Path(f), buffer.getvalue())


def write_text(self, text, *args, **kwargs):
    slowly(self, text.encode())


torch.save = save
Path.write_text = write_text
sys.exit(main(sys.argv[2:]))
