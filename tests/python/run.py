"""meson test's entry to the pytest suite of the mfma package.

Exit 77 is meson's "skipped": used where the suite cannot run here, each time
with the reason printed.  pytest's 5 ("no tests were collected") becomes 77
as well, so an empty run is never a failure.

In a sanitized build libmfmaclient is linked with the sanitizers' runtimes,
which must come first in a process; python3 has none, so this script runs
itself again with them in LD_PRELOAD (found with the build's C compiler).
The Python process then runs without leak checking (CPython keeps memory to
the end by design); the daemons the tests start get the original
ASAN_OPTIONS back (conftest.py), leaks included."""

import faulthandler
import os
import subprocess
import sys

SKIP = 77
# The suite takes seconds (about 11 under ASan); one that hangs prints every
# thread's stack and fails at this point, long before meson's timeout.
WATCHDOG_S = 180
RUNTIMES = {"address": "libasan.so", "undefined": "libubsan.so"}


def preload(sanitized):
    """Runs this script again with the sanitizers' runtimes preloaded;
    returns a reason to skip when they cannot be found."""
    cc = os.environ.get("MFMA_CC") or "cc"
    libs = []
    for name in sanitized.split(","):
        lib = RUNTIMES.get(name)
        if lib is None:
            return f"no runtime known for -fsanitize={name}"
        try:
            path = subprocess.run([cc, f"-print-file-name={lib}"], capture_output=True,
                                  text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError) as e:
            return f"{cc} -print-file-name={lib}: {e}"
        if not os.path.isabs(path):
            return f"{cc} does not know where {lib} is (a compiler other than GCC?)"
        libs.append(path)
    env = dict(os.environ, MFMA_PRELOADED="1",
               MFMA_DAEMON_ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", ""),
               LD_PRELOAD=" ".join(libs + [os.environ.get("LD_PRELOAD", "")]).strip(),
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main():
    sanitized = os.environ.get("MFMA_SANITIZED")
    if sanitized and not os.environ.get("MFMA_PRELOADED"):
        why = preload(sanitized)
        print(f"SKIP: this build is sanitized (-Db_sanitize={sanitized}) and {why}; the "
              "python suite runs on the normal build")
        return SKIP
    try:
        import numpy  # noqa: F401
        import pytest
    except ImportError as e:
        print(f"SKIP: {e} (install python3-numpy and python3-pytest: scripts/setup.sh)")
        return SKIP
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
    here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", "--rootdir", here, here])
    if rc == 5:
        print("SKIP: pytest collected no tests")
        return SKIP
    return int(rc)


if __name__ == "__main__":
    sys.exit(main())
