"""The daemon the tests talk to, started as tests/integration/harness.c does:
a temporary directory, a configuration file, --socket, and SIGTERM at the
end (which must exit 0)."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

# The fleet tests' port picker: one for every Python test.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "haproxy"))
from fleet import free_port  # noqa: E402


def _start(conf="", extra=(), d=None):
    """A daemon in a new temporary directory, or in d again (a restart:
    its socket and configuration, the log started afresh)."""
    binary = os.environ.get("MFMAD_BIN")
    if not binary:
        pytest.skip("MFMAD_BIN is not set (run through meson test)")
    d = d or tempfile.mkdtemp(prefix="mfmad-py-")
    sock = os.path.join(d, "mfmad.sock")
    with open(os.path.join(d, "mfmad.conf"), "w") as f:
        f.write(conf + "\n")
    log = open(os.path.join(d, "mfmad.log"), "w")
    # The CPU backend runs every dtype, dense and 2:4, on any machine: the
    # tests are about the client, the GPU backends have their own.
    # Under run.py's preloaded sanitizers the daemon (linked with them
    # itself) gets the caller's ASAN_OPTIONS back: leak checking included.
    env = dict(os.environ)
    if "MFMA_DAEMON_ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] = env.pop("MFMA_DAEMON_ASAN_OPTIONS")
        env.pop("LD_PRELOAD", None)
    p = subprocess.Popen([binary, "--config", os.path.join(d, "mfmad.conf"), "--socket", sock,
                          "--log-level", "info", "--backends", "cpu", *extra],
                         stdout=subprocess.DEVNULL, stderr=log, env=env)
    # Ready when the socket accepts and the daemon has logged "ready" (its
    # Unix socket accepts before its TCP listener is bound).
    for _ in range(300):
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(sock)
            s.close()
            with open(os.path.join(d, "mfmad.log")) as f:
                if "ready: " in f.read():
                    return p, d, sock, log
        except OSError:
            s.close()
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    p.wait()
    log.close()
    raise RuntimeError("mfmad did not start:\n" + open(os.path.join(d, "mfmad.log")).read())


def _stop(p, d, log):
    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    log.close()
    text = open(os.path.join(d, "mfmad.log")).read()
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    assert rc == 0, f"mfmad exited {rc}:\n{text}"


@pytest.fixture(scope="session")
def daemon():
    """The endpoint of one mfmad shared by the session's tests."""
    p, d, sock, log = _start()
    yield "unix:" + sock
    _stop(p, d, log)


@pytest.fixture
def client(daemon):
    import mfma
    with mfma.Client(daemon, timeout_ms=60000) as c:
        yield c


@pytest.fixture
def token_daemon(tmp_path):
    """A daemon with a loopback TCP listener that asks for a token:
    (tcp endpoint, token)."""
    port = free_port()
    token = "py-secret-token-of-issue-13"
    tf = tmp_path / "token"
    tf.write_text(token + "\n")
    tf.chmod(0o600)
    p, d, sock, log = _start(f'listen = {{ tcp = true; tcp_address = "127.0.0.1"; '
                             f'tcp_port = {port}; token_file = "{tf}"; }};')
    yield f"tcp:127.0.0.1:{port}", token, str(tf)
    _stop(p, d, log)


@pytest.fixture
def tls_daemon(tmp_path):
    """A daemon with a loopback TLS listener that asks for client
    certificates, made for the run by tests/tls/make_certs.sh:
    (tls endpoint, certificate directory)."""
    certs = tmp_path / "certs"
    script = os.path.join(os.environ.get("MFMA_SOURCE_ROOT", ""), "tests", "tls", "make_certs.sh")
    subprocess.run(["bash", script, str(certs)], check=True)
    port = free_port()
    p, d, sock, log = _start(f'listen = {{ tcp = true; tcp_port = {port}; '
                             f'tls_cert = "{certs}/server.pem"; tls_key = "{certs}/server.key"; '
                             f'tls_client_ca = "{certs}/ca.pem"; }};')
    yield f"tls:localhost:{port}", str(certs)
    _stop(p, d, log)


@pytest.fixture(scope="module")
def small_daemon():
    """A daemon with small limits, for the region tests: frames of at most
    1 MiB (so a matrix that travels in a frame is refused, and one in a
    region is not), 3 regions and 16 MiB of them per connection."""
    p, d, sock, log = _start("limits = { max_frame_mb = 1; max_regions_per_conn = 3; "
                             "max_region_mb_per_conn = 16; };")
    yield "unix:" + sock
    _stop(p, d, log)
