"""python3 -m mfma COMMAND: see mfma.bench for `bench`."""

import sys

from . import bench


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python3 -m mfma bench [--plot OUT.png] [...]   (bench --help for more)")
        return 0 if argv else 2
    if argv[0] == "bench":
        return bench.main(argv[1:])
    print(f"python3 -m mfma: unknown command '{argv[0]}' (try: bench)", file=sys.stderr)
    return 2


sys.exit(main())
