"""The ``highwaynet`` command.

    highwaynet train mlp --data mnist5k --depth 50 --width 50 --epochs 10
    highwaynet train mlp --data mnist5k --depth 50 --plain
    highwaynet train mlp --out runs/x --resume
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__

EPILOG = "Run folders hold config.json, metrics.jsonl, checkpoint.pt, model.pt and results.json."


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _add_training_options(p: argparse.ArgumentParser, epochs: int, lr: float, optimizer: str) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--epochs", type=_positive_int, default=epochs, help="passes over the training data (default: %(default)s)")
    g.add_argument("--batch-size", type=_positive_int, default=100, help="training batch size (default: %(default)s)")
    g.add_argument("--optimizer", choices=("sgd", "adam", "adamw"), default=optimizer, help="(default: %(default)s)")
    g.add_argument("--lr", type=float, default=lr, help="learning rate (default: %(default)s)")
    g.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: %(default)s)")
    g.add_argument("--weight-decay", type=float, default=0.0, help="(default: %(default)s)")
    g.add_argument("--schedule", choices=("constant", "cosine", "step"), default="constant",
                   help="learning-rate schedule over the epochs (default: %(default)s)")
    g.add_argument("--seed", type=int, default=0, help="seeds initialisation, dropout and data order (default: %(default)s)")
    g.add_argument("--device", default="auto", help="auto (CUDA, MPS, then CPU), cpu, cuda, cuda:1, ... (default: %(default)s)")
    g.add_argument("--amp", action="store_true", help="train under bfloat16 autocast")
    g.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    r = p.add_argument_group("run folder")
    r.add_argument("--out", help="the run folder (default: runs/<a name from the options>)")
    r.add_argument("--resume", action="store_true",
                   help="continue the run in --out after its last finished epoch, with its saved config")


def _add_data_options(p: argparse.ArgumentParser, choices: Sequence[str], default: str) -> None:
    g = p.add_argument_group("data")
    g.add_argument("--data", choices=choices, default=default, help="data set (default: %(default)s)")
    g.add_argument("--data-dir", help="folder with the data files (default: $HIGHWAYNET_DATA, ~/.cache/highwaynet, "
                                      "and where packages install them)")
    g.add_argument("--download", action="store_true", help="download missing files from their public source")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="highwaynet", description="Highway Networks: train the layers, rerun the papers' experiments.",
        epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"highwaynet {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    train = commands.add_parser("train", help="train one model", description="Train one model.")
    models = train.add_subparsers(dest="model", required=True, metavar="MODEL")

    mlp = models.add_parser(
        "mlp", help="a deep highway (or plain) fully connected network on images",
        description="A deep fully connected classifier on images: one plain layer to the width, then "
                    "depth-1 highway layers (or, with --plain, depth plain layers), then softmax. "
                    "Prints one line per epoch and writes a run folder.",
        epilog="example: highwaynet train mlp --data mnist5k --depth 50 --width 50 --epochs 10")
    _add_data_options(mlp, ("mnist5k", "fashion-mnist", "digits", "mnist"), "mnist5k")
    g = mlp.add_argument_group("model")
    g.add_argument("--depth", type=int, default=50, help="hidden layers, at least 2 (default: %(default)s)")
    g.add_argument("--width", type=_positive_int, default=50, help="units per hidden layer (default: %(default)s)")
    g.add_argument("--plain", action="store_true", help="a plain network of the same depth, no highway gates")
    g.add_argument("--activation", default="relu", choices=("relu", "tanh", "sigmoid", "gelu"),
                   help="(default: %(default)s)")
    g.add_argument("--gate-bias", type=float, default=-4.0, help="initial transform-gate bias (default: %(default)s)")
    g.add_argument("--max-train", type=_positive_int, help="use at most this many training images")
    _add_training_options(mlp, epochs=10, lr=0.1, optimizer="sgd")
    mlp.set_defaults(run=_train_mlp)
    return parser


def _train_config(args: argparse.Namespace):
    from .training import TrainConfig

    return TrainConfig(epochs=args.epochs, optimizer=args.optimizer, lr=args.lr, momentum=args.momentum,
                       weight_decay=args.weight_decay, schedule=args.schedule, seed=args.seed,
                       device=args.device, amp=args.amp, compile=args.compile)


def _train_mlp(args: argparse.Namespace) -> None:
    from .recipes import mlp

    if args.depth < 2:
        raise ValueError(f"--depth must be at least 2 (one plain layer, then highway layers), got {args.depth}")
    if args.resume and not args.out:
        raise ValueError("--resume needs --out, the run folder to continue")
    config = mlp.MLPConfig(data=args.data, depth=args.depth, width=args.width, plain=args.plain,
                           activation=args.activation, gate_bias=args.gate_bias, batch_size=args.batch_size,
                           max_train=args.max_train, train=_train_config(args))
    kind = "plain" if args.plain else "highway"
    out = args.out or f"runs/mlp-{args.data}-{kind}{args.depth}-seed{args.seed}"
    print(f"training a {args.depth}-layer {kind} MLP on {args.data}; run folder: {out}")
    results = mlp.run(config, out, resume=args.resume, data_dir=args.data_dir, download=args.download)
    test = results["test"]
    print(f"test_loss {test['loss']:.4f}  test_acc {test['acc']:.4f}  "
          f"({results['parameters']:,} parameters, {results['seconds']:.1f}s on {results['device']})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except KeyboardInterrupt:
        return 130
    except (ValueError, FileNotFoundError, FileExistsError, OSError) as error:
        print(f"highwaynet: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
