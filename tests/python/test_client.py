"""Weights, errors, futures, lifetime; the 2:4 helpers, bf16 and the check
tolerance."""

import concurrent.futures
import errno
import os
import threading
import time

import numpy as np
import pytest

import mfma


@pytest.fixture
def rng():
    return np.random.default_rng(7)


def f16(rng, shape):
    return rng.standard_normal(shape).astype(np.float16)


# ---- status ----

def test_status_devices(client):
    # The CPU backend has no kernel providers; a GPU device lists its own
    # ("wgmma:pinned", "cusparselt:excluded", ...).  Read after the
    # fields before it, so a struct out of step with mfma.h shows here.
    d = client.status().devices[0]
    assert d.backend == "cpu" and d.variants
    assert d.providers == ()


# ---- resident weights ----

def test_weight_lifecycle(client, rng):
    a, b = f16(rng, (48, 64)), f16(rng, (64, 16))
    w = client.load_weight("py-w", a, sparse="prune")
    assert (w.name, w.rows, w.cols, w.dtype, w.sparse) == ("py-w", 48, 64, "f16", True)
    # This daemon has no state directory: it stores nothing, and says nothing.
    assert w.stored is None
    assert "py-w" in [x.name for x in client.weights()]
    assert "py-w" in [x.name for x in client.status().weights]
    mfma.check(client.gemm(None, b, weight="py-w"), a, b, sparse="prune")
    with pytest.raises(mfma.AlreadyExists) as e:
        client.load_weight("py-w", a)
    assert e.value.code == 3 and "py-w" in e.value.message
    client.load_weight("py-w", a, replace=True)  # dense now
    mfma.check(client.gemm(None, b, weight="py-w"), a, b)
    # The worker that ran them launched and answered; its phases (read
    # through the library's struct, field by field) fit in the uptime.
    st = client.status()
    work = st.devices[0].worker_ns
    assert set(work) == {"idle", "prepare", "launch", "wait", "answers"}
    assert work["launch"] > 0 and work["answers"] > 0
    assert sum(work.values()) <= st.uptime_ns
    # The CPU backend leaves no launch running, so its loop starts none.
    assert st.devices[0].loop_starts == 0
    client.unload_weight("py-w")
    assert "py-w" not in [x.name for x in client.weights()]
    with pytest.raises(mfma.NotFound) as e:
        client.gemm(None, b, weight="py-w")
    assert e.value.code == 2 and e.value.code_name == "NOT_FOUND"
    assert "py-w" in str(e.value)
    with pytest.raises(mfma.NotFound):
        client.unload_weight("py-w")


def test_weight_compressed(client, rng):
    a, b = f16(rng, (16, 32)), f16(rng, (32, 8))
    sp = mfma.prune(a)
    assert client.load_weight("py-sp", sp).sparse
    mfma.check(client.submit(None, b, weight="py-sp").result(30), sp, b)
    client.unload_weight("py-sp")


# ---- errors ----

def test_daemon_errors_carry_code_and_message(client, rng):
    a, b = f16(rng, (8, 32)), f16(rng, (16, 8))
    with pytest.raises(mfma.InvalidArgument) as e:
        client.gemm(a, b)
    assert isinstance(e.value, mfma.DaemonError) and isinstance(e.value, mfma.Error)
    assert e.value.code == 1 and e.value.code_name == "INVALID_ARGUMENT"
    assert "32" in e.value.message and "16" in e.value.message
    # Not 2:4: the daemon names the row and the columns of the group.
    dense = np.ones((4, 8), np.float16)
    with pytest.raises(mfma.InvalidArgument, match=r"row 0, columns 0\.\.3"):
        client.gemm(dense, np.ones((8, 4), np.float16), sparse="validate")
    with pytest.raises(mfma.InvalidArgument):
        client.gemm(a, b.astype(np.float32).reshape(16, 8)[:, :].copy())
    # The connection is still good after refusals.
    assert client.ping(b"abc") > 0


def test_transport_errors(tmp_path):
    with pytest.raises(mfma.TransportError) as e:
        mfma.Client(f"unix:{tmp_path}/none.sock")
    assert e.value.code == -errno.ENOENT and "is mfmad running" in e.value.message
    # An endpoint the library cannot parse is the caller's argument, not a
    # connection that failed: ArgumentError, a ValueError too.
    with pytest.raises(mfma.ArgumentError) as e:
        mfma.Client("tcp:host")
    assert e.value.code == -errno.EINVAL
    assert isinstance(e.value, ValueError) and not isinstance(e.value, mfma.TransportError)


def test_argument_errors(client):
    """What the library refuses before sending (an empty weight name) is a
    ValueError, and the connection stays good."""
    a = np.ones((4, 8), dtype=np.float32)
    with pytest.raises(ValueError) as e:
        client.load_weight("", a)
    assert isinstance(e.value, mfma.ArgumentError) and e.value.code == -errno.EINVAL
    with pytest.raises(mfma.ArgumentError):
        client.unload_weight("")
    assert client.ping(b"x") > 0


def test_spin(daemon, rng, monkeypatch):
    # The spin window: the keyword, else $MFMA_SPIN_US; answers unchanged.
    a = rng.standard_normal((16, 24), dtype=np.float32)
    b = rng.standard_normal((24, 8), dtype=np.float32)
    monkeypatch.delenv("MFMA_SPIN_US", raising=False)
    with mfma.Client(daemon, timeout_ms=60000) as c:
        assert c.spin_us == 0
    with mfma.Client(daemon, timeout_ms=60000, spin_us=300) as c:
        assert c.spin_us == 300
        for _ in range(5):
            assert mfma.check(c.gemm(a, b), a, b) < mfma.tolerance("f32", 24)
    monkeypatch.setenv("MFMA_SPIN_US", "150")
    with mfma.Client(daemon, timeout_ms=60000) as c:
        assert c.spin_us == 150
    with mfma.Client(daemon, timeout_ms=60000, spin_us=0) as c:
        assert c.spin_us == 0
    with pytest.raises(ValueError, match="spin_us=1000001"):
        mfma.Client(daemon, spin_us=1000001)
    monkeypatch.setenv("MFMA_SPIN_US", "soon")
    with pytest.raises(mfma.Error, match="MFMA_SPIN_US"):
        mfma.Client(daemon)


def test_closed_client(daemon):
    with mfma.Client(daemon) as c:
        assert c.endpoint == daemon
    with pytest.raises(mfma.TransportError, match="closed"):
        c.ping()
    c.close()  # twice is fine


def test_submit_error_in_future(client, rng):
    fut = client.submit(None, f16(rng, (16, 4)), weight="no-such-weight")
    with pytest.raises(mfma.NotFound):
        fut.result(30)
    assert isinstance(fut.exception(), mfma.NotFound)


# ---- futures ----

def test_futures_pipelined(client, rng):
    pairs = [(f16(rng, (32, 64)), f16(rng, (64, 8 + i % 5))) for i in range(40)]
    futs = [client.submit(a, b) for a, b in pairs]
    done = list(concurrent.futures.as_completed(futs, timeout=60))
    assert len(done) == len(futs)
    for f, (a, b) in zip(futs, pairs):
        mfma.check(f.result(), a, b)
        assert f.info.timing["total_ns"] > 0


def test_futures_from_threads(client, rng):
    """Four threads submit on one shared client and one blocking caller
    interleaves gemm(); every answer is the right one."""
    work = [(f16(rng, (16, 32)), f16(rng, (32, 4 + i % 7))) for i in range(64)]
    results = {}
    errors = []

    def submitter(idx):
        try:
            futs = {i: client.submit(*work[i]) for i in range(idx, len(work), 4)}
            for i, f in futs.items():
                results[i] = f.result(60)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for a, b in work[:8]:
        mfma.check(client.gemm(a, b), a, b)
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == len(work)
    for i, (a, b) in enumerate(work):
        mfma.check(results[i], a, b)


def _gemms_seen(c):
    """GEMMs the daemon has read: queued, running or done on its devices."""
    return sum(d.queue_depth + d.in_flight + d.completed + d.failed for d in c.status().devices)


def test_corked_submits(client, daemon, rng):
    """In a corked block the submits are held (the daemon has none of them
    while it lasts) and go out together at its end; every answer right; a
    blocking call inside the block writes them first."""
    pairs = [(f16(rng, (24, 40)), f16(rng, (40, 3 + i % 4))) for i in range(32)]
    with mfma.Client(daemon, timeout_ms=60000) as other:
        before = _gemms_seen(other)
        with client.corked():
            futs = [client.submit(a, b) for a, b in pairs]
            time.sleep(0.1)
            assert _gemms_seen(other) == before
        done = list(concurrent.futures.as_completed(futs, timeout=60))
        assert len(done) == len(futs)
        for f, (a, b) in zip(futs, pairs):
            mfma.check(f.result(), a, b)
        assert _gemms_seen(other) == before + len(pairs)
        with client.corked():
            futs = [client.submit(a, b) for a, b in pairs[:4]]
            a, b = pairs[4]
            mfma.check(client.gemm(a, b), a, b)
            assert _gemms_seen(other) == before + len(pairs) + 5
        for f, (a, b) in zip(futs, pairs):
            mfma.check(f.result(60), a, b)


def test_close_fails_pending_futures(daemon, rng):
    """close() with requests in flight fails each unanswered future with
    TransportError (ECANCELED); each answered one keeps its result."""
    # On a resident 4096 x 4096 weight, 24 GEMMs of N = 256 (some 200 GFLOP,
    # over a second on the one CPU device, 2 MiB sent each) outlast the gap
    # between the last submit and close() by far: 24 of 2 x 1024^3 sent
    # with their A (50 GFLOP) were all answered by then once, in a CI run
    # that shared its two cores with other work.
    a = f16(rng, (4096, 4096))
    with mfma.Client(daemon) as loader:
        loader.load_weight("close_pending", a)
    c = mfma.Client(daemon)
    pairs = [(a, f16(rng, (4096, 256))) for _ in range(24)]
    futs = [c.submit(None, b, weight="close_pending") for _, b in pairs]
    c.close()
    cancelled = 0
    for f, (a, b) in zip(futs, pairs):
        e = f.exception(60)
        if e is None:
            mfma.check(f.result(), a, b)
        else:
            assert isinstance(e, mfma.TransportError) and e.code == -errno.ECANCELED
            cancelled += 1
    print(f"close() with 24 GEMMs submitted: {cancelled} cancelled, {24 - cancelled} answered")
    assert cancelled > 0
    with mfma.Client(daemon, timeout_ms=120000) as loader:
        loader.unload_weight("close_pending")


# ---- 2:4 helpers ----

def test_canonical_format():
    # Row 0: kept positions 1 and 3 -> nibble 1 | 3 << 2 = 13.
    # Row 1: positions 0 and 2 in group 0, nothing in group 1 (two spare
    # slots: 0 and an ordered pair of unused positions).
    a = np.array([[0, 5, 0, 7, 1, 2, 0, 0],
                  [3, 0, 4, 0, 0, 0, 0, 0]], np.float32)
    sp = mfma.compress(a)
    assert sp.values.tolist() == [[5, 7, 1, 2], [3, 4, 0, 0]]
    assert sp.meta[0, 0] & 0xF == 13
    assert (sp.meta[0, 0] >> 4) & 0xF == 0 | 1 << 2
    assert sp.meta[1, 0] & 0xF == 0 | 2 << 2
    assert np.array_equal(sp.to_dense(), a)


def test_prune_and_compress(rng):
    a = rng.standard_normal((6, 40)).astype(np.float32)
    pruned = mfma.prune_dense(a)
    groups = pruned.reshape(6, 10, 4)
    assert ((groups != 0).sum(axis=2) <= 2).all()
    # The two largest magnitudes survive.
    keep = np.sort(np.abs(a.reshape(6, 10, 4)), axis=2)[:, :, 2:]
    assert np.array_equal(np.sort(np.abs(groups), axis=2)[:, :, 2:], keep)
    assert np.array_equal(mfma.compress(pruned).to_dense(), pruned)
    with pytest.raises(ValueError, match=r"row 0, group 0"):
        mfma.compress(a)
    with pytest.raises(ValueError, match="multiple of 4"):
        mfma.prune(np.zeros((2, 6), np.float32))


# ---- bf16, tolerance ----

def test_bf16_round_trip():
    x = np.array([1.0, -2.5, 0.0, 3.140625, np.inf], np.float32)
    assert np.array_equal(mfma.from_bf16(mfma.to_bf16(x)), x)
    # Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
    assert mfma.from_bf16(mfma.to_bf16(np.float32(1 + 2 ** -8)))[()] == 1.0
    assert np.isnan(mfma.from_bf16(mfma.to_bf16(np.float32("nan"))))
    assert mfma.to_bf16(x).dtype == mfma.bfloat16 and mfma.bfloat16.itemsize == 2


def test_tolerance_catches_a_lost_partial_sum(client, rng):
    assert mfma.tolerance("i32", 4096) == 0
    assert 2.4e-4 < mfma.tolerance("f32", 4096) < 2.5e-4
    assert mfma.tolerance("f16", 64) > mfma.tolerance("f32", 64)
    a, b = f16(rng, (64, 1024)), f16(rng, (1024, 16))
    d = client.gemm(a, b)
    err = mfma.check(d, a, b)
    assert err < mfma.tolerance("f32", 1024) / 10
    # D without the last 16 products of every dot product.
    lost = d - (a[:, -16:].astype(np.float32) @ b[-16:, :].astype(np.float32))
    with pytest.raises(mfma.CheckError, match="over the tolerance"):
        mfma.check(lost, a, b)


def test_token(token_daemon, monkeypatch):
    endpoint, token, token_file = token_daemon
    monkeypatch.delenv("MFMA_TOKEN_FILE", raising=False)
    with mfma.Client(endpoint, token=token) as c:
        assert c.ping(b"x") > 0
    monkeypatch.setenv("MFMA_TOKEN_FILE", token_file)
    with mfma.Client(endpoint) as c:
        assert c.ping() > 0
    monkeypatch.delenv("MFMA_TOKEN_FILE")
    # Refused by the daemon, which says why, not a crash or a dropped link.
    with pytest.raises(mfma.TransportError) as e:
        with mfma.Client(endpoint, token="wrong") as c:
            c.ping()
    assert "takes a token first (listen.token_file)" in e.value.message


def test_tls(tls_daemon, monkeypatch):
    endpoint, certs = tls_daemon
    for name in ("MFMA_TLS_CA", "MFMA_TLS_CERT", "MFMA_TLS_KEY"):
        monkeypatch.delenv(name, raising=False)
    rng = np.random.default_rng(14)
    a = rng.standard_normal((16, 16), dtype=np.float32)
    b = rng.standard_normal((16, 16), dtype=np.float32)
    with mfma.Client(endpoint, tls_ca=f"{certs}/ca.pem", tls_cert=f"{certs}/client.pem",
                     tls_key=f"{certs}/client.key", timeout_ms=10000) as c:
        assert mfma.check(c.gemm(a, b), a, b) < mfma.tolerance("f32", 16)
    monkeypatch.setenv("MFMA_TLS_CA", f"{certs}/ca.pem")
    monkeypatch.setenv("MFMA_TLS_CERT", f"{certs}/client.pem")
    monkeypatch.setenv("MFMA_TLS_KEY", f"{certs}/client.key")
    with mfma.Client(endpoint, timeout_ms=10000) as c:
        assert c.ping() > 0
    # The daemon's certificate names localhost, not this.
    with pytest.raises(mfma.Error, match="mismatch"):
        mfma.Client(endpoint, tls_server_name="mfmad.example")
    # Without a client certificate the first call carries the refusal.
    monkeypatch.delenv("MFMA_TLS_CERT")
    monkeypatch.delenv("MFMA_TLS_KEY")
    with pytest.raises(mfma.Error, match="certificate required"):
        with mfma.Client(endpoint, timeout_ms=10000) as c:
            c.ping()


# ---- the collecting thread (review of 2026-12-05) ----

def test_futures_survive_a_daemon_restart(tmp_path, rng):
    """The daemon killed and started again on the same socket: the
    library sends the submitted GEMM again on the new connection, and the
    future completes with its result; the thread that collects answers
    outlives the lost connection (it had ended, and every later future
    hung)."""
    from conftest import _start, _stop
    p, d, sock, log = _start()
    c = mfma.Client("unix:" + sock, timeout_ms=60000)
    try:
        a, b = f16(rng, (64, 256)), f16(rng, (256, 64))
        mfma.check(c.submit(a, b).result(30), a, b)
        p.kill()
        p.wait()
        log.close()
        os.unlink(sock)
        fut = c.submit(a, b)  # no daemon: held by the library
        time.sleep(0.3)
        p, d, sock, log = _start(d=d)
        mfma.check(fut.result(30), a, b)
        mfma.check(c.submit(a, b).result(30), a, b)
        assert c._pump.is_alive()
    finally:
        c.close()
        _stop(p, d, log)


def test_region_released_once_futures_are_done(small_daemon, rng):
    """A submitted request holds its region arrays until its future is
    done, and no longer: the thread that delivered it kept the last one's
    arrays alive while it slept, so the region stayed registered (and
    counted against max_regions_per_conn) after close()."""
    with mfma.Client(small_daemon, timeout_ms=60000) as c:
        for _ in range(5):  # more regions than the connection may hold
            r = c.region(1 << 20)
            b = r.array((256, 64), np.float16)
            b[...] = f16(rng, (256, 64))
            a = f16(rng, (64, 256))
            d = c.submit(a, b).result(30)
            mfma.check(d, a, b)
            del b, d
            assert r.close() is True and r.released


def test_close_from_a_done_callback(daemon, rng):
    c = mfma.Client(daemon, timeout_ms=60000)
    closed = threading.Event()
    errors = []

    def close_it(f):
        try:
            c.close()
        except Exception as e:  # noqa: BLE001 - what the test looks for
            errors.append(e)
        closed.set()

    a, b = f16(rng, (64, 256)), f16(rng, (256, 64))
    f = c.submit(a, b)
    f.add_done_callback(close_it)
    assert closed.wait(30)
    assert errors == []
    assert c._h is None  # mfma_close ran
    with pytest.raises(mfma.Error):
        c.submit(a, b)


def test_collecting_thread_waits_on_open_files_only(daemon, rng, monkeypatch):
    """close() from a done-callback runs on the collecting thread.  That
    thread then must not wait on the client's pipe or socket: closed, their
    numbers are the next client's, and two threads reading one pipe lost
    the byte that wakes for close(), which then joined forever."""
    import mfma.client as mc
    real = mc.select.select
    closed_fds = []

    def checked(r, w, x, timeout=None):
        for fd in r:
            try:
                os.fstat(fd)
            except OSError:
                closed_fds.append(fd)
        return real(r, w, x, timeout)

    monkeypatch.setattr(mc.select, "select", checked)
    for _ in range(3):
        c = mfma.Client(daemon, timeout_ms=60000)
        closed = threading.Event()
        f = c.submit(f16(rng, (16, 16)), f16(rng, (16, 16)))
        f.add_done_callback(lambda _f, c=c: (c.close(), closed.set()))
        assert closed.wait(30)
        c._pump.join(10)
        assert not c._pump.is_alive()
    assert closed_fds == []


def test_unclosed_client_is_collected(daemon, rng):
    """A client that submitted and was dropped unclosed is collected and
    closed (its thread held it by a bound method before)."""
    import gc
    import weakref
    def fds():
        return len(os.listdir("/proc/self/fd"))
    before = fds()
    for _ in range(5):
        c = mfma.Client(daemon, timeout_ms=60000)
        a, b = f16(rng, (16, 16)), f16(rng, (16, 16))
        c.submit(a, b).result(30)
        ref = weakref.ref(c)
        del c
        for _ in range(50):
            gc.collect()
            if ref() is None:
                break
            time.sleep(0.02)
        assert ref() is None
    time.sleep(0.2)
    assert fds() <= before + 1


def test_missing_token_file_leaves_nothing_open(daemon, monkeypatch, tmp_path):
    monkeypatch.setenv("MFMA_TOKEN_FILE", str(tmp_path / "no-such-token"))
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(10):
        with pytest.raises(FileNotFoundError):
            mfma.Client(daemon)
    assert len(os.listdir("/proc/self/fd")) <= before


def test_bf16_rounds_float64_once():
    # 1 + 2^-8 + 2^-30 lies just above the halfway point between 1 and
    # 1 + 2^-7: bf16 0x3f81.  Through float32 first it becomes exactly
    # 1 + 2^-8, a tie, rounded to the even 0x3f80.
    x = np.array([1 + 2 ** -8 + 2 ** -30, -(1 + 2 ** -8 + 2 ** -30), 1 + 2 ** -8], np.float64)
    assert mfma.to_bf16(x).view("<u2").tolist() == [0x3F81, 0xBF81, 0x3F80]
    assert mfma.to_bf16(np.float64(1e300)).view("<u2")[()] == 0x7F80
