"""GEMMs through the daemon: every dtype, dense and 2:4, C/alpha/beta,
output types, strided views."""

import numpy as np
import pytest

import mfma

DTYPES = ["f32", "f16", "bf16", "i8"]


def rand(dt, shape, rng):
    if dt == "i8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    x = rng.standard_normal(shape)
    if dt == "bf16":
        return mfma.to_bf16(x)
    return x.astype({"f32": np.float32, "f16": np.float16}[dt])


@pytest.fixture
def rng():
    return np.random.default_rng(13)


@pytest.mark.parametrize("dt", DTYPES)
def test_dense(client, rng, dt):
    a, b = rand(dt, (37, 64), rng), rand(dt, (64, 19), rng)
    d = client.gemm(a, b)
    assert d.shape == (37, 19)
    assert d.dtype == (np.int32 if dt == "i8" else np.float32)
    mfma.check(d, a, b)
    if dt == "i8":
        assert np.array_equal(d, a.astype(np.int64) @ b.astype(np.int64))
    assert client.last_info.timing["total_ns"] > 0


@pytest.mark.parametrize("dt", DTYPES)
def test_prune(client, rng, dt):
    a, b = rand(dt, (32, 128), rng), rand(dt, (128, 24), rng)
    d = client.gemm(a, b, sparse="prune")
    mfma.check(d, a, b, sparse="prune")


@pytest.mark.parametrize("dt", DTYPES)
def test_compressed_and_validate(client, rng, dt):
    a, b = rand(dt, (16, 64), rng), rand(dt, (64, 8), rng)
    sp = mfma.prune(a)
    assert sp.values.shape == (16, 32) and sp.meta.shape == (16, 2)
    d1 = client.gemm(sp, b)
    d2 = client.gemm(sp.to_dense(), b, sparse="validate")
    mfma.check(d1, sp, b)
    assert np.array_equal(d1, d2)


@pytest.mark.parametrize("dt", ["f16", "bf16"])
def test_out_dtype_same_as_input(client, rng, dt):
    a, b = rand(dt, (8, 32), rng), rand(dt, (32, 8), rng)
    d = client.gemm(a, b, out_dtype=dt)
    assert d.dtype == (np.float16 if dt == "f16" else mfma.bfloat16)
    mfma.check(d, a, b)


def test_c_alpha_beta(client, rng):
    a, b = rand("f16", (20, 48), rng), rand("f16", (48, 12), rng)
    c = rng.standard_normal((20, 12)).astype(np.float32)
    d = client.gemm(a, b, c=c, alpha=0.5, beta=-2.0)
    mfma.check(d, a, b, c=c, alpha=0.5, beta=-2.0)


def test_strided_views_are_copied(client, rng):
    base = rand("f32", (24, 80), rng)
    b = rand("f32", (40, 6), rng)
    a = base[:, ::2]                    # a view with a column step
    assert not a.flags.c_contiguous
    mfma.check(client.gemm(a, b), a, b)
    at = rand("f32", (40, 24), rng).T   # a transpose
    mfma.check(client.gemm(at, b), at, b)
    big = a.astype(">f4")               # big-endian
    mfma.check(client.gemm(big, b), a, b)
    fortran = np.asfortranarray(a)
    mfma.check(client.gemm(fortran, b), a, b)


def test_strided_views_refused_when_asked(daemon, rng):
    a = rand("f32", (8, 32), rng)[:, ::2]
    b = rand("f32", (16, 4), rng)
    with mfma.Client(daemon, copy_strided=False) as c:
        with pytest.raises(ValueError, match="not a C-contiguous"):
            c.gemm(a, b)
        with pytest.raises(ValueError, match="np.ascontiguousarray"):
            c.gemm(np.ascontiguousarray(a), np.asfortranarray(b))
        mfma.check(c.gemm(np.ascontiguousarray(a), b), a, b)


def test_shapes_refused_locally(client, rng):
    with pytest.raises(ValueError, match="2-D"):
        client.gemm(np.zeros(16, np.float32), np.zeros((16, 2), np.float32))
    with pytest.raises(TypeError, match="float64"):
        client.gemm(np.zeros((2, 4)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="sparse="):
        client.gemm(np.zeros((2, 4), np.float32), np.zeros((4, 2), np.float32), sparse="yes")


def test_torch_tensors(client, rng):
    torch = pytest.importorskip("torch")
    a = torch.randn(16, 32, dtype=torch.float16)
    b = torch.randn(32, 8, dtype=torch.float16)
    d = client.gemm(a, b)
    assert isinstance(d, torch.Tensor) and d.dtype == torch.float32
    mfma.check(d.numpy(), a.numpy(), b.numpy())
    ab = torch.randn(16, 32).to(torch.bfloat16)
    bb = torch.randn(32, 8).to(torch.bfloat16)
    d = client.gemm(ab, bb, out_dtype="bf16")
    assert d.dtype == torch.bfloat16
    # bf16 widens to f32 exactly: the reference sees the values sent.
    mfma.check(d, ab.float().numpy(), bb.float().numpy())
