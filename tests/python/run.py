"""meson test's entry to the pytest suite of the mfma package.

Exit 77 is meson's "skipped": used where the suite cannot run here, each time
with the reason printed.  pytest's 5 ("no tests were collected") becomes 77
as well, so an empty run is never a failure."""

import os
import sys

SKIP = 77


def main():
    sanitized = os.environ.get("MFMA_SANITIZED")
    if sanitized:
        print(f"SKIP: this build is sanitized (-Db_sanitize={sanitized}): libmfmaclient is "
              "linked with the ASan runtime, which must come first in a process, and a "
              "python3 process has none; the python suite runs on the normal build")
        return SKIP
    try:
        import numpy  # noqa: F401
        import pytest
    except ImportError as e:
        print(f"SKIP: {e} (install python3-numpy and python3-pytest: scripts/setup.sh)")
        return SKIP
    here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "--rootdir", here, here])
    if rc == 5:
        print("SKIP: pytest collected no tests")
        return SKIP
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
