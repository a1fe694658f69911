"""``highwaynet`` as a user runs it, with every file write slowed, and optionally a SIGKILL in the
middle of one: for tests/test_run_folder.py's kill loop.

    python kill_worker.py KILL_AT ARGS...

Every file the package writes into the run folder (highwaynet.training.files) is written in several
pieces with a pause between them, so that a kill from outside lands in one often; with KILL_AT = k > 0
the process kills itself halfway through its k-th such write (0: never).
"""

import os
import signal
import sys
import time

from highwaynet.cli import main
from highwaynet.training import files

kill_at = int(sys.argv[1])
writes = 0


def slowly(f, data: bytes) -> None:
    global writes
    writes += 1
    pieces = [data[i:i + max(1, len(data) // 4)] for i in range(0, len(data), max(1, len(data) // 4))]
    for i, piece in enumerate(pieces):
        f.write(piece)
        f.flush()
        time.sleep(0.01)
        if writes == kill_at and i == len(pieces) // 2:
            os.kill(os.getpid(), signal.SIGKILL)


files._write_all = slowly
sys.exit(main(sys.argv[2:]))
