"""The papercuts of issue 13, as a user meets them: mfmactl's checked
resident-weight GEMM and its tolerance, the default socket and its errors,
pkg-config's include directory, and the bench plot."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import mfma

MFMACTL = os.environ.get("MFMACTL_BIN", "mfmactl")


def ctl(*args, env=None, user=None):
    pre = None
    if user is not None:
        def pre():
            os.setgroups([])
            os.setgid(user)
            os.setuid(user)
    return subprocess.run([MFMACTL, *args], capture_output=True, text=True, env=env,
                          preexec_fn=pre, timeout=120)


@pytest.fixture
def npys(tmp_path):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 256)).astype(np.float16)
    b = rng.standard_normal((256, 16)).astype(np.float16)
    np.save(tmp_path / "A.npy", a)
    np.save(tmp_path / "B.npy", b)
    np.save(tmp_path / "Bt.npy", b.T.copy())
    return tmp_path


def test_submit_weight_check(daemon, npys):
    e = ["-e", daemon]
    assert ctl(*e, "load", "pc-w", str(npys / "A.npy"), "--sparse", "prune").returncode == 0
    try:
        r = ctl(*e, "--json", "submit", "--weight", "pc-w", "-a", str(npys / "A.npy"),
                "-b", str(npys / "B.npy"), "--check")
        assert r.returncode == 0, r.stderr
        chk = json.loads(r.stdout)["check"]
        assert chk["ok"] and chk["rel_error"] < chk["tolerance"]
        assert chk["tolerance"] == pytest.approx(mfma.tolerance("f32", 256))
        # Without A there is nothing to check against: say what to add.
        r = ctl(*e, "submit", "--weight", "pc-w", "-b", str(npys / "B.npy"), "--check")
        assert r.returncode == 2 and "add -a A.npy" in r.stderr
        # An A of another shape is not the weight's.
        r = ctl(*e, "submit", "--weight", "pc-w", "-a", str(npys / "Bt.npy"),
                "-b", str(npys / "B.npy"), "--check")
        assert r.returncode == 4 and "not the matrix it was loaded from" in r.stdout
        # -a with --weight means nothing without --check.
        r = ctl(*e, "submit", "--weight", "pc-w", "-a", str(npys / "A.npy"),
                "-b", str(npys / "B.npy"))
        assert r.returncode == 2 and "only for --check" in r.stderr
    finally:
        ctl(*e, "unload", "pc-w")


def test_check_tolerance_by_dtype_and_k(daemon, npys):
    r = ctl("-e", daemon, "--json", "submit", "-a", str(npys / "A.npy"), "-b",
            str(npys / "B.npy"), "--check", "--out-dtype", "f16")
    assert r.returncode == 0, r.stderr
    chk = json.loads(r.stdout)["check"]
    assert chk["tolerance"] == pytest.approx(mfma.tolerance("f16", 256))
    assert chk["tolerance"] < 1.1e-3  # was 1e-2 whatever K
    r = ctl("-e", daemon, "--json", "submit", "-a", str(npys / "A.npy"), "-b",
            str(npys / "B.npy"), "--check")
    assert json.loads(r.stdout)["check"]["tolerance"] < 2e-5  # was 1e-2 for f16 inputs


NOBODY = 65534


@pytest.fixture(scope="module")
def nobody():
    """The uid of nobody, when mfmactl can be run as nobody here (root is
    needed, and the build tree must be readable by others)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run mfmactl as nobody")
    try:
        r = ctl("--help", user=NOBODY)
    except OSError as e:
        pytest.skip(f"nobody cannot run {MFMACTL}: {e}")
    if r.returncode != 0:
        pytest.skip(f"nobody cannot run {MFMACTL}: {r.stderr.strip()}")
    return NOBODY


@pytest.fixture
def open_dir():
    """A directory nobody may enter (pytest's tmp_path is below a 0700 one)."""
    d = tempfile.mkdtemp(prefix="mfma-py-")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d)


def test_default_socket_tries_the_system_socket(open_dir, nobody):
    tmp_path = open_dir
    env = {k: v for k, v in os.environ.items() if k != "MFMA_ENDPOINT"}
    env["XDG_RUNTIME_DIR"] = str(tmp_path)
    r = ctl("ping", env=env, user=nobody)
    # Nobody is not in the mfmad group: whatever runs here, this fails, and
    # says it looked at both sockets.
    assert r.returncode != 0
    assert "unix:/run/mfmad/mfmad.sock" in r.stderr
    assert f"also tried unix:{tmp_path}/mfmad.sock" in r.stderr
    env.pop("XDG_RUNTIME_DIR")
    r = ctl("ping", env=env, user=nobody)
    assert "unix:/run/mfmad/mfmad.sock" in r.stderr and "/tmp/mfmad-" not in r.stderr


def test_permission_denied_says_join_the_group(open_dir, nobody):
    path = os.path.join(open_dir, "mfmad.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(1)
    os.chmod(path, 0o660)
    try:
        r = ctl("-e", "unix:" + path, "ping", user=nobody)
        assert r.returncode != 0
        assert "Permission denied" in r.stderr and "usermod -aG mfmad" in r.stderr
    finally:
        s.close()


def test_pkg_config_include_dir(tmp_path):
    build = os.environ.get("MFMA_BUILD_ROOT")
    src = os.environ.get("MFMA_SOURCE_ROOT")
    cc = shutil.which("cc")
    if not (build and src and cc and shutil.which("pkg-config")):
        pytest.skip("needs MFMA_BUILD_ROOT, cc and pkg-config")
    inc = tmp_path / "include"
    (inc / "mfma").mkdir(parents=True)
    shutil.copy(os.path.join(src, "client", "lib", "mfma.h"), inc / "mfma" / "mfma.h")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(build, "meson-private"))
    cflags = subprocess.run(["pkg-config", "--cflags", f"--define-variable=includedir={inc}",
                             "mfmaclient"], capture_output=True, text=True, env=env,
                            check=True).stdout.split()
    assert f"-I{inc}" in cflags
    prog = tmp_path / "p.c"
    prog.write_text("#include <mfma/mfma.h>\nint main(void) { return MFMA_TYPE_F16 == 2 ? 0 : 1; }\n")
    r = subprocess.run([cc, "-fsyntax-only", *cflags, str(prog)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_bench_plot(daemon, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench.png"
    saved = tmp_path / "runs.json"
    env = dict(os.environ, MFMACTL_BIN=MFMACTL)
    r = subprocess.run([sys.executable, "-m", "mfma", "bench", "-e", daemon, "-j", "1,2",
                        "-n", "20", "--plot", str(out), "--json", str(saved), "--",
                        "--m", "32", "--n", "8", "--k", "64"],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = json.loads(saved.read_text())
    assert [x["concurrency"] for x in runs] == [1, 2]
    assert all(len(x["latency_samples_ns"]) == 20 for x in runs)
