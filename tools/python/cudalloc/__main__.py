"""`python -m cudalloc ARGS` and the `cudalloc` console script: the cudalloc command-line tool
(inspect, convert, view, diff, replay, options), the binary shipped in this package or built
in the checkout."""
import os
import sys

from ._capi import CudallocError, cli_path


def main(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        path = cli_path()
    except CudallocError as e:
        print(f"cudalloc: {e}", file=sys.stderr)
        return 2
    os.execv(path, [path] + args)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
