"""mfma: numpy (and PyTorch) GEMMs through mfmad, on libmfmaclient.

    import numpy as np, mfma
    a, b = np.random.rand(256, 512).astype(np.float16), np.random.rand(512, 64).astype(np.float16)
    with mfma.Client() as c:
        d = c.gemm(a, b)                    # 256 x 64 float32
    mfma.check(d, a, b)                     # relative error; CheckError over the tolerance

See Client for the calls, Client.region / mfma.Region for memory shared with
the daemon (B, C and D not copied through the socket), mfma.prune /
mfma.compress for the 2:4 format, mfma.bfloat16 for bf16 arrays and
mfma.Error for what failures carry."""

import numpy as np

from . import _lib
from .client import Client, DeviceStatus, GemmFuture, GemmInfo, Status, WeightInfo
from .dtypes import as_float, bfloat16, from_bf16, to_bf16
from .errors import (AlreadyExists, ArgumentError, DaemonError, DeadlineExceeded, Error,
                     FailedPrecondition, Internal, InvalidArgument, Malformed, NotFound,
                     ResourceExhausted, TransportError, Unavailable)
from .region import Region
from .sparse import Sparse24, compress, prune, prune_dense
from . import dtypes as _dtypes

__version__ = _lib.text(_lib.mfma_version())

__all__ = [
    "Client", "Region", "GemmFuture", "GemmInfo", "Status", "DeviceStatus", "WeightInfo",
    "bfloat16", "to_bf16", "from_bf16", "as_float",
    "Error", "DaemonError", "TransportError", "ArgumentError", "InvalidArgument", "NotFound", "AlreadyExists",
    "ResourceExhausted", "Unavailable", "DeadlineExceeded", "Internal", "Malformed",
    "FailedPrecondition",
    "Sparse24", "prune", "compress", "prune_dense",
    "reference", "tolerance", "check", "CheckError",
]


class CheckError(AssertionError):
    """check() found a result over its tolerance."""


def tolerance(out_dtype, k):
    """The largest relative Frobenius error a correct answer of `out_dtype`
    with inner dimension k may have (libmfmaclient's rule, the one mfmactl
    --check applies): 2*u_out + (k + 2) * 2^-24, u_out = 2^-24 (f32),
    2^-11 (f16), 2^-8 (bf16); 0 for int32."""
    return _lib.mfma_check_tolerance(_dtypes.code_of(out_dtype), int(k))


def reference(a, b, *, c=None, alpha=1.0, beta=0.0, sparse=None):
    """alpha * A.B + beta * C in float64, with A pruned to 2:4 first when
    sparse="prune" (as the daemon does); a may be an mfma.Sparse24."""
    if isinstance(a, Sparse24):
        a = a.to_dense()
    elif sparse == "prune":
        a = prune_dense(a)
    r = float(np.float32(alpha)) * (as_float(a) @ as_float(b))
    if c is not None and beta != 0:
        r = r + float(np.float32(beta)) * as_float(c)
    return r


def check(d, a, b, *, c=None, alpha=1.0, beta=0.0, sparse=None):
    """The relative Frobenius error of D against reference(); raises
    CheckError when it is over tolerance(D's dtype, K)."""
    if type(d).__module__.split(".")[0] == "torch":
        from .client import _from_torch
        d = _from_torch(d)
    d = np.asarray(d)
    ref = reference(a, b, c=c, alpha=alpha, beta=beta, sparse=sparse)
    if d.shape != ref.shape:
        raise CheckError(f"D is {d.shape}, expected {ref.shape}")
    den = np.linalg.norm(ref)
    num = np.linalg.norm(as_float(d) - ref)
    err = 0.0 if num == 0 else (float("inf") if den == 0 else float(num / den))
    tol = tolerance(d.dtype, np.asarray(b).shape[0])
    if err > tol or (tol == 0 and err != 0):
        raise CheckError(f"relative error {err:.3g} over the tolerance {tol:.3g} "
                         f"({d.dtype} output, K={np.asarray(b).shape[0]})")
    return err
