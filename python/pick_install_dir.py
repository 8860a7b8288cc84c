"""Prints where the mfma package should be installed under PREFIX: DEFAULT
(meson's choice) when the interpreter searches it, else the interpreter's
own site directory under PREFIX, else DEFAULT.  Used by python/meson.build."""

import os
import sys


def main(prefix, default):
    paths = [os.path.normpath(p) for p in sys.path if p]
    if os.path.normpath(default) in paths:
        return default
    prefix = os.path.normpath(prefix)
    for p in paths:
        rel = os.path.relpath(p, prefix)
        if rel.startswith("..") or rel.startswith("local" + os.sep):
            continue
        if os.path.basename(p) in ("dist-packages", "site-packages"):
            return p
    return default


if __name__ == "__main__":
    print(main(sys.argv[1], sys.argv[2]))
