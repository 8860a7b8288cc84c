"""Shared-memory regions from Python (Client.region, mfma.Region): results
through a region against the byte path and float64, out= written in place,
no matrix bytes in the frames, the refusals (TCP, limits, the daemon's
bounds), and closing while arrays still view a region."""

import gc

import numpy as np
import pytest

import mfma


@pytest.fixture
def rng():
    return np.random.default_rng(10)


def fill(r, x, offset=0):
    """x copied into a new array of region r at offset; returns it."""
    v = r.array(x.shape, x.dtype, offset=offset)
    v[...] = x
    return v


# ---- results ----

@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int8])
def test_region_equals_byte_path_and_reference(client, rng, dt):
    m, k, n = 96, 128, 24
    if dt == np.int8:
        a = rng.integers(-8, 8, (m, k), dtype=np.int8)
        b = rng.integers(-8, 8, (k, n), dtype=np.int8)
        c = rng.integers(-100, 100, (m, n), dtype=np.int32)
        out_dt, alpha, beta = np.int32, 1.0, 1.0  # integer GEMMs are exact
    else:
        a, b = rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)
        c = rng.standard_normal((m, n)).astype(np.float32)
        out_dt, alpha, beta = np.float32, 0.5, 2.0
    with client.region(1 << 20) as r:
        rb = fill(r, b)
        rc = fill(r, c, offset=64 * 1024)
        d = r.array((m, n), out_dt, offset=128 * 1024)
        d[...] = 0
        got = client.gemm(a, rb, c=rc, alpha=alpha, beta=beta, out=d)
        assert got is d
        want = client.gemm(a, b, c=c, alpha=alpha, beta=beta)  # every byte in the frames
        assert np.array_equal(d, want)
        mfma.check(d, a, b, c=c, alpha=alpha, beta=beta)
        del rb, rc, d, got


def test_region_resident_weight_and_submit(client, rng):
    a = rng.standard_normal((64, 256)).astype(np.float32)
    client.load_weight("py-rg", a, sparse="prune")
    try:
        with client.region(1 << 20) as r:
            b = fill(r, rng.standard_normal((256, 16)).astype(np.float32))
            outs = [r.array((64, 16), np.float32, offset=65536 + i * 4096) for i in range(4)]
            futs = [client.submit(None, b, weight="py-rg", out=o) for o in outs]
            for f, o in zip(futs, outs):
                assert f.result(30) is o
                mfma.check(o, a, np.array(b), sparse="prune")
                # The four may run as one batched launch, whose summation
                # order need not be a single GEMM's: close, not bit-equal.
                np.testing.assert_allclose(o, client.gemm(None, np.array(b), weight="py-rg"),
                                           rtol=1e-5, atol=1e-4)
            del b, outs, futs, f, o
    finally:
        client.unload_weight("py-rg")


def test_out_written_in_place(client, rng):
    a, b = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal((64, 8))
    with client.region(4096 * 4) as r:
        d = r.array((32, 8), np.float32, offset=8192)
        d[...] = np.nan
        again = r.array((32, 8), np.float32, offset=8192)  # the same bytes, another view
        assert client.gemm(a, b.astype(np.float32), out=d) is d
        assert r.holds(d) and not np.isnan(again).any()
        assert np.array_equal(again, d)
        mfma.check(again, a, b.astype(np.float32))
        # out= outside a region: D comes in the frame and is copied there.
        plain = np.full((32, 8), np.nan, np.float32)
        assert client.gemm(a, b.astype(np.float32), out=plain) is plain
        assert np.array_equal(plain, d)
        del d, again


def test_out_checked_before_sending(client, rng):
    a, b = rng.standard_normal((16, 32)).astype(np.float32), np.ones((32, 8), np.float32)
    with client.region(4096) as r:
        with pytest.raises(ValueError, match="float16, but D will be f32"):
            client.gemm(a, b, out=r.array((16, 8), np.float16))
        with pytest.raises(ValueError, match=r"shape \(8, 16\), but D is 16x8"):
            client.gemm(a, b, out=r.array((8, 16), np.float32))
        with pytest.raises(ValueError, match="C-contiguous"):
            client.gemm(a, b, out=r.array((16, 16), np.float32)[:, :8])
        with pytest.raises(ValueError, match="runs past the region's end"):
            r.array((1024, 2), np.float32)
        with pytest.raises(ValueError, match="multiple of 4"):
            r.array((2, 2), np.float32, offset=2)


def test_no_matrix_bytes_in_frames(small_daemon, rng):
    """The daemon takes frames of at most 1 MiB: B (2 MiB) and D (4 MiB) get
    through only when they stay in the region."""
    a = rng.standard_normal((128, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8192)).astype(np.float32)
    with mfma.Client(small_daemon, timeout_ms=60000) as c:
        c.load_weight("big-n", a)
        with c.region(b.nbytes + 128 * 8192 * 4) as r:
            rb = fill(r, b)
            d = r.array((128, 8192), np.float32, offset=b.nbytes)
            assert c.gemm(None, rb, weight="big-n", out=d) is d
            mfma.check(d, a, b)
            del rb, d
    # The same request with its bytes in the frame is refused.
    with mfma.Client(small_daemon, timeout_ms=60000) as c:
        with pytest.raises(mfma.Error) as e:
            c.gemm(None, b, weight="big-n")
        assert "limits.max_frame_mb" in e.value.message


# ---- refusals ----

def test_region_over_tcp_refused(token_daemon):
    ep, token, _ = token_daemon
    with mfma.Client(ep, token=token, timeout_ms=10000) as c:
        with pytest.raises(mfma.FailedPrecondition) as e:
            c.region(4096)
    # libmfmaclient refuses before any frame (it has no memfd to send over
    # TCP); the daemon's own refusal of a raw register_region frame is
    # tested in tests/integration/test_regions.c.
    assert e.value.code == 9 and e.value.code_name == "FAILED_PRECONDITION"
    assert "Unix-socket" in e.value.message and ep in e.value.message


def test_region_limits_named(small_daemon):
    with mfma.Client(small_daemon, timeout_ms=10000) as c:
        with pytest.raises(mfma.ResourceExhausted) as e:
            c.region(17 << 20)
        assert "max_region_mb_per_conn" in e.value.message
        regions = [c.region(4096) for _ in range(3)]
        with pytest.raises(mfma.ResourceExhausted) as e:
            c.region(4096)
        assert "max_regions_per_conn" in e.value.message
        for r in regions:
            assert r.close() is True and r.released
        # The daemon let go of them: three fit again.
        regions = [c.region(4096) for _ in range(3)]
        for r in regions:
            r.close()


def test_daemon_bounds_error_for_a_replaced_weight(small_daemon, rng):
    """out= in a region goes with its size (d_bytes): a weight replaced by
    another client since (another M) is refused by the daemon, which
    names the length, and nothing is written."""
    b = np.ones((32, 8), np.float32)
    with mfma.Client(small_daemon, timeout_ms=10000) as owner, \
            mfma.Client(small_daemon, timeout_ms=10000) as user:
        owner.load_weight("grows", np.ones((16, 32), np.float32))
        with user.region(4096) as r:
            end = r.array((16, 8), np.float32, offset=4096 - 16 * 8 * 4)
            rb = fill(r, b)
            user.gemm(None, rb, weight="grows", out=end)  # M = 16 seen and cached
            owner.load_weight("grows", np.ones((64, 32), np.float32), replace=True)
            mid = r.array((16, 8), np.float32, offset=1024)
            for out in (end, mid):
                with pytest.raises(mfma.InvalidArgument) as e:
                    user.gemm(None, rb, weight="grows", out=out)
                assert "d.region.length=512 but the matrix needs 2048 bytes" in e.value.message
            assert (mid == 0).all()
            del end, rb, mid
        owner.unload_weight("grows")


# ---- lifetime ----

def test_close_while_arrays_view_it(small_daemon):
    """close() does not unmap under a live array: the release waits for the
    last one (then the daemon's region slot is free again)."""
    c = mfma.Client(small_daemon, timeout_ms=10000)
    r = c.region(4096)
    x = r.array((1024,), np.float32)
    x[:] = 7
    assert r.close() is False and r.closed and not r.released
    with pytest.raises(ValueError, match="closed"):
        r.array((4,), np.float32)
    x += 1  # still mapped: no crash
    view = x[10:20]
    del x
    gc.collect()
    assert not r.released and (view == 8).all()
    del view
    assert r.released
    # The client closed while a region's array lives: the connection (and
    # with it the mapping) stays until that array goes.
    r2 = c.region(4096)
    y = r2.array((4,), np.int32)
    with c:
        pass
    with pytest.raises(mfma.TransportError, match="closed"):
        c.ping()
    y[:] = 3
    assert (y == 3).all() and not r2.released
    del y
    assert r2.released and c._h is None
    # What the daemon held was let go: three regions fit on a new client.
    with mfma.Client(small_daemon, timeout_ms=10000) as c2:
        rs = [c2.region(4096) for _ in range(3)]
        del rs


def test_every_module_is_installed():
    """python/meson.build lists the package's files one by one: a module
    missing there (region.py was, at first) imports from the source tree
    but not after meson install."""
    import os
    root = os.environ.get("MFMA_SOURCE_ROOT")
    if not root:
        pytest.skip("MFMA_SOURCE_ROOT is not set (run through meson test)")
    listed = open(os.path.join(root, "python", "meson.build")).read()
    for name in sorted(os.listdir(os.path.join(root, "python", "mfma"))):
        if name.endswith(".py"):
            assert f"'mfma/{name}'" in listed, f"python/meson.build does not install {name}"


def test_bench_shm(daemon, tmp_path):
    """python3 -m mfma bench --shm runs mfmactl bench --shm."""
    import json
    import os
    import subprocess
    import sys
    if not os.environ.get("MFMACTL_BIN"):
        pytest.skip("MFMACTL_BIN is not set (run through meson test)")
    saved = tmp_path / "runs.json"
    r = subprocess.run([sys.executable, "-m", "mfma", "bench", "-e", daemon, "-j", "1,2",
                        "-n", "10", "--shm", "--json", str(saved), "--",
                        "--m", "32", "--n", "8", "--k", "64"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    runs = json.loads(saved.read_text())
    assert [x["concurrency"] for x in runs] == [1, 2] and all(x["shm"] for x in runs)
