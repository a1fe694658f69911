"""``highwaynet`` as a user runs it, with every file write slowed, and optionally a SIGKILL in the
middle of one: for tests/test_run_folder.py's kill loop.

    python kill_worker.py KILL_AT ARGS...
    python kill_worker.py --serve

Every file the package writes into the run folder (highwaynet.training.files) is written in several
pieces with a pause between them, so that a kill from outside lands in one often; with KILL_AT = k > 0
the process kills itself halfway through its k-th such write (0: never).

With ``--serve``, many runs, each in a process of its own forked from this one, which has imported
what a run imports (torch, its compiler, which an optimizer's construction imports, the recipe, the
data's loader) once: so that a kill lands in the run's work rather than in the interpreter's start-up,
and dozens of runs do not each pay that start-up. Each line on stdin is a JSON list ``[KILL_AT,
SECONDS, STDERR, ARGS]``: the run's process writes its stderr into the file STDERR and is sent SIGKILL
SECONDS after it was forked, if it has not ended by then; the answer, one JSON line on stdout, is
``{"code": ..., "seconds": ...}``: its exit code as ``subprocess`` gives it (``-9`` for SIGKILL) and
how long it lived.
"""

import json
import os
import signal
import sys
import time

from highwaynet.cli import main
from highwaynet.training import files

kill_at = int(sys.argv[1]) if sys.argv[1] != "--serve" else 0
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


def _run_in_child(args: list[str], stderr: str) -> None:
    """In the forked process: stdin and stdout on /dev/null, stderr into its file, ``main(args)``; never returns."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDWR)
        err = os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(null, 0), os.dup2(null, 1), os.dup2(err, 2)
        code = main(args)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code or 0)


def serve() -> None:
    global kill_at, writes
    import sklearn.datasets  # noqa: F401 (the digits' loader)
    import torch._dynamo  # noqa: F401 (what torch.optim's optimizers import on their first construction)

    import highwaynet.data  # noqa: F401
    import highwaynet.recipes.mlp  # noqa: F401
    import highwaynet.training  # noqa: F401

    for line in sys.stdin:
        kill_at, seconds, stderr, args = json.loads(line)
        writes = 0
        sys.stdout.flush()
        sys.stderr.flush()
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _run_in_child(args, stderr)
        while True:  # (this process reaps it: its pid stays its own until then, so the kill cannot miss)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() - start >= seconds:
                os.kill(pid, signal.SIGKILL)
                _, status = os.waitpid(pid, 0)
                break
            time.sleep(0.002)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status), "seconds": time.monotonic() - start}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--serve":
        serve()
    else:
        sys.exit(main(sys.argv[2:]))
