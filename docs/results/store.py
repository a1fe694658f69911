"""Keep an experiment's results for the docs: ``docs/results/NAME.json`` from a finished run folder.

    python docs/results/store.py NAME RUN_FOLDER --command "highwaynet reproduce depth --data mnist5k"
    python docs/results/store.py depth-mnist5k runs/depth-mnist5k --command "..." --figure depth.png

Copies what the recipe wrote (a sweep's ``summary.json``, or ``gates.json`` / ``lesion.json``; a
setting chosen among sweeps, ``reproduce sentences --choose-from``, finds its runs in the sweeps) with
where and how it ran: the command, the machine and versions (a run's ``config.json``), the wall time.
The docs' results pages are built from these files (``docs/_ext/results.py``), never typed by hand;
storing one also rewrites the README's results table, and ``--figure`` copies one of the result's
figures, as the docs draw it, to ``docs/images/NAME.png`` (the README shows the depth study's).
"""

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "_ext"))

import results  # noqa: E402  (docs/_ext/results.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the results file's name, without .json")
    parser.add_argument("folder", type=Path, help="the experiment's output folder")
    parser.add_argument("--command", required=True, help="the command that made it, as a user types it")
    parser.add_argument("--seconds", type=float, help="the command's wall time (default: the summary's)")
    parser.add_argument("--note", default="", help="anything a reader needs to know about the run")
    parser.add_argument("--caveat", default="", help="what a reader of the README's results row must know to read it "
                                                     "(shown in the row)")
    parser.add_argument("--figure", help="one of the result's figures to copy to docs/images/NAME.png")
    args = parser.parse_args()
    for name, recipe in (("summary.json", None), ("gates.json", "gates"), ("lesion.json", "lesion")):
        if (args.folder / name).is_file():
            result = json.loads((args.folder / name).read_text())
            if result.get("left_out"):  # (a split sweep's, written while another process still trained some runs)
                raise SystemExit(f"{args.folder / name} is a partial summary: it leaves out "
                                 f"{', '.join(str(r.get('run')) for r in result['left_out'])}, unfinished when it was "
                                 f"written; run the sweep's command again once the process writing them has ended")
            recipe = recipe or result.get("recipe") or json.loads((args.folder / "sweep.json").read_text())["recipe"]
            break
    else:
        raise SystemExit(f"{args.folder} holds no summary.json, gates.json or lesion.json")
    configs = sorted(args.folder.rglob("config.json")) or sorted(Path(result.get("run_dir", "")).glob("config.json")) \
        or [c for folder in result.get("sweeps", {}).values() for c in sorted(Path(folder).rglob("config.json"))]
    environment = json.loads(configs[0].read_text())["environment"] if configs else {}
    record = {"recipe": recipe, "command": args.command, "note": args.note,
              **({"caveat": args.caveat} if args.caveat else {}), "environment": environment,
              "seconds": args.seconds if args.seconds is not None else result.get("seconds"), "result": result}
    out = HERE / f"{args.name}.json"
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {out}")
    results.results([args.name])
    if args.figure:
        image = HERE.parent / "images" / f"{args.name}.png"
        image.parent.mkdir(exist_ok=True)
        shutil.copyfile(results.GENERATED / args.name / args.figure, image)
        print(f"wrote {image}")
    if results.write_readme_summary():
        print("updated README.md's results table")


if __name__ == "__main__":
    main()
