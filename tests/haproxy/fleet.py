"""Real mfmad daemons (and haproxy) on loopback for the fleet tests: ports
chosen free at run time, each daemon in its own temporary directory,
everything stopped by the caller's finally.  Paths come from meson's
environment: MFMAD_BIN, MFMACTL_BIN, HA_LOAD_BIN.

Every temporary directory of a test (tempdir()) lies under one folder of
its process, removed when the process exits, unless an exception ended it:
then the folder is kept, its path printed, with every daemon's log."""
import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

MFMAD = os.environ.get("MFMAD_BIN", "mfmad")
MFMACTL = os.environ.get("MFMACTL_BIN", "mfmactl")
HA_LOAD = os.environ.get("HA_LOAD_BIN", "ha_load")


_root = None
_failed = False


def _keep_on_failure(kind, value, tb):
    global _failed
    _failed = True
    _default_excepthook(kind, value, tb)


def _remove_root():
    if _root is None:
        return
    if _failed:
        print(f"kept for inspection (the daemons' logs are in it): {_root}", file=sys.stderr)
    else:
        shutil.rmtree(_root, ignore_errors=True)


_default_excepthook = sys.excepthook
sys.excepthook = _keep_on_failure
atexit.register(_remove_root)


def tempdir(prefix):
    """A new directory under this process's folder (made at the first call)."""
    global _root
    if _root is None:
        _root = tempfile.mkdtemp(prefix="mfma-fleet-")
    return tempfile.mkdtemp(prefix=prefix, dir=_root)


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


# Ports are picked below Linux's default ephemeral range (32768-60999): a
# port bind(0) has just released lies in the range the kernel also gives
# outgoing connections, so another test's client could take it before the
# daemon binds it.  Walked in order from a start derived from the pid, so
# this process never gets the same port twice (a daemon's TCP and metrics
# ports picked in a row once were the same one with bind(0)).
_PORT_LOW, _PORT_SPAN = 20000, 12000
_next_port = (os.getpid() * 7919 + int(time.time())) % _PORT_SPAN


def free_port():
    """A loopback TCP port free now and not handed out before by this
    process."""
    global _next_port
    for _ in range(_PORT_SPAN):
        port = _PORT_LOW + _next_port % _PORT_SPAN
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free loopback port")


def readyz(metrics_port):
    """The HTTP status of /readyz, or None when nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/readyz", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def make_certs(directory):
    """Certificates for a TLS fleet (tests/tls/make_certs.sh), and the
    client library's environment (MFMA_TLS_*) set to use them, for mfmactl
    and ha_load started after this."""
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run(["bash", os.path.join(here, "..", "tls", "make_certs.sh"), directory],
                   check=True)
    os.environ["MFMA_TLS_CA"] = os.path.join(directory, "ca.pem")
    os.environ["MFMA_TLS_CERT"] = os.path.join(directory, "client.pem")
    os.environ["MFMA_TLS_KEY"] = os.path.join(directory, "client.key")
    return directory


class Daemon:
    def __init__(self, name, threads=1, port=None, metrics_port=None, conf=None, tls=None):
        """tls: a make_certs() directory: the node's TCP listener speaks TLS
        and asks for client certificates of its CA."""
        self.name = name
        self.tls = tls
        self.dir = tempdir(f"{name}-")
        self.port = port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.threads = threads
        self.proc = None
        self.conf = conf or 'weights = { persist = false; };'
        if tls:
            self.conf += (f'\nlisten = {{ tls_cert = "{tls}/server.pem"; '
                          f'tls_key = "{tls}/server.key"; tls_client_ca = "{tls}/ca.pem"; }};')

    @property
    def endpoint(self):
        if self.tls:
            return f"tls:localhost:{self.port}"
        return f"tcp:127.0.0.1:{self.port}"

    def start(self, wait_ready=True):
        conf = os.path.join(self.dir, "mfmad.conf")
        with open(conf, "w") as f:
            f.write(self.conf + '\nshutdown_grace_ms = 20000;\n')
        self.log = open(os.path.join(self.dir, "log"), "ab")
        self.proc = subprocess.Popen(
            [MFMAD, "--config", conf, "--socket", os.path.join(self.dir, "s.sock"),
             "--tcp", f"127.0.0.1:{self.port}", "--metrics", f"127.0.0.1:{self.metrics_port}",
             "--backends", "cpu", "--threads", str(self.threads), "--log-level", "notice"],
            stdout=self.log, stderr=self.log)
        if not wait_ready:
            return self
        wait_for(lambda: readyz(self.metrics_port) == 200 or self.proc.poll() is not None,
                 20, f"{self.name} ready")
        assert self.proc.poll() is None, f"{self.name} exited: {self.logtext()}"
        return self

    def logtext(self):
        with open(os.path.join(self.dir, "log"), "rb") as f:
            return f.read().decode(errors="replace")

    def wait(self, timeout=30):
        return self.proc.wait(timeout=timeout)

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def status(self):
        out = ctl(self.endpoint, "status", "--json", check=True)
        return json.loads(out.stdout)


def ctl(endpoint, *args, check=False, timeout=30):
    r = subprocess.run([MFMACTL, "-e", endpoint, "--timeout", "10000", *args],
                       capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"mfmactl {' '.join(args)}: {r.returncode} {r.stderr}")
    return r


def gemm_ok(status):
    """GEMMs answered OK by a daemon, from mfmactl status --json."""
    c = status.get("counters", {})
    return c.get("ok", 0)
