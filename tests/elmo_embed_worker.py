"""``highwaynet elmo embed`` recording which process writes each batch's piece (into the file named by
$ELMO_PIECES_LOG); run by tests/test_elmo_embed.py under torchrun, so that a split of the work in
which every process embeds every batch (the same file, twice the work) fails the test."""

import os
import sys

from highwaynet.cli import main
from highwaynet.elmo import embed

_write_piece = embed._write_piece


def _recorded(path, *args):
    with open(os.environ["ELMO_PIECES_LOG"], "a") as log:
        log.write(f"{os.environ.get('RANK', '0')} {path.name}\n")
    return _write_piece(path, *args)


embed._write_piece = _recorded
sys.exit(main())
