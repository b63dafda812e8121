#!/usr/bin/env python3
"""Runs one GPU check for CTest (tests/gpu and tests/python register them; scripts/gpu_check.sh
runs them all with `ctest -L gpu`):

    gpu_step.py OUT_DEFAULT [--gpus N] [--modules a,b] [--fresh FILE]... [--needs FILE]...
                [--preload LIBRARY] -- COMMAND [ARGS...]

The command runs in $OUT (OUT_DEFAULT when OUT is unset; created if missing), so the files it
writes under relative names land in gpu_check.sh's output folder. Before it runs:
  --gpus N       skipped (exit 77) with fewer than N CUDA devices (asked of the driver);
  --modules a,b  skipped when one of these Python modules is not installed;
  --needs FILE   skipped when FILE (written by an earlier check) does not exist;
  --fresh FILE   FILE is removed first, so a check reading it never sees an old run's copy.
  --preload LIB  LD_PRELOAD=LIB for the command only, not for this script: the shim then
                 serves the program under test and nothing else.
A COMMAND without a slash that is not on PATH is looked for in /usr/local/cuda/bin and the
check is skipped when it is not found (compute-sanitizer). Otherwise the command's own exit
status is the result (77 from the command is a skip too).
"""
import argparse
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "bench"))
from child import SKIP, skip_reason  # noqa: E402

TOOLKIT_BIN = "/usr/local/cuda/bin"


def parse_args(argv):
    """The options before "--", and the command after it as args.command."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_default")
    p.add_argument("--gpus", type=int, default=0)
    p.add_argument("--modules", default="")
    p.add_argument("--needs", action="append", default=[])
    p.add_argument("--fresh", action="append", default=[])
    p.add_argument("--preload")
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        p.error("no command after --")
    split = argv.index("--")
    args = p.parse_args(argv[:split])
    args.command = argv[split + 1:]
    return args


def find_program(name):
    """The path of `name`: as given when it has a slash, else from PATH or the toolkit."""
    if os.sep in name:
        return name
    return shutil.which(name) or shutil.which(name, path=TOOLKIT_BIN)


def why_skip(args):
    """The reason to skip, or None."""
    modules = [m for m in args.modules.split(",") if m]
    reason = skip_reason(modules, gpus=args.gpus)
    if reason:
        return reason
    missing = [f for f in args.needs if not os.path.exists(f)]
    if missing:
        return f"{', '.join(missing)} not found (the check that writes it did not run)"
    if find_program(args.command[0]) is None:
        return f"{args.command[0]} not found"
    return None


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = os.environ.get("OUT") or args.out_default
    os.makedirs(out, exist_ok=True)
    os.chdir(out)
    reason = why_skip(args)
    if reason:
        print(f"SKIP: {reason}", flush=True)
        return SKIP
    for path in args.fresh:
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ)
    if args.preload:
        env["LD_PRELOAD"] = args.preload
    program = find_program(args.command[0])
    print(f"(in {os.getcwd()}) " + " ".join(args.command), flush=True)
    os.execve(program, [program] + args.command[1:], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
