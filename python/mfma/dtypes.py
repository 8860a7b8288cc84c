"""Element types.  numpy has no bfloat16, so mfma names one:

    mfma.bfloat16   a 2-byte numpy dtype (a structured dtype over a
                    little-endian uint16 holding the bf16 bits).  Arrays of it
                    are made with mfma.to_bf16(x) (round to nearest even)
                    and read back with mfma.from_bf16(d) (exact, to float32).
                    Arrays of ml_dtypes.bfloat16, where that package is
                    installed, are accepted too.

f32, f16 and i8 are numpy's float32, float16 and int8; i32 (the output of i8
GEMMs) is int32."""

import numpy as np

from . import _lib

bfloat16 = np.dtype([("bf16", "<u2")])

_NAMES = {"f32": _lib.TYPE_F32, "f16": _lib.TYPE_F16, "bf16": _lib.TYPE_BF16,
          "i8": _lib.TYPE_I8, "i32": _lib.TYPE_I32}
_NP = {_lib.TYPE_F32: np.dtype("<f4"), _lib.TYPE_F16: np.dtype("<f2"),
       _lib.TYPE_BF16: bfloat16, _lib.TYPE_I8: np.dtype("i1"), _lib.TYPE_I32: np.dtype("<i4")}
NAME = {v: k for k, v in _NAMES.items()}


def code_of(dt):
    """The wire type of a numpy dtype, a dtype name ("f16") or a torch dtype
    name; TypeError naming it when mfmad has no such type."""
    if isinstance(dt, str) and dt in _NAMES:
        return _NAMES[dt]
    if isinstance(dt, str) and dt in ("bfloat16", "torch.bfloat16"):
        return _lib.TYPE_BF16
    d = np.dtype(dt)
    if d == bfloat16 or d.name == "bfloat16":
        return _lib.TYPE_BF16
    if d.kind == "f" and d.itemsize == 4:
        return _lib.TYPE_F32
    if d.kind == "f" and d.itemsize == 2:
        return _lib.TYPE_F16
    if d.kind == "i" and d.itemsize == 1:
        return _lib.TYPE_I8
    if d.kind == "i" and d.itemsize == 4:
        return _lib.TYPE_I32
    raise TypeError(f"dtype {d} is not one mfmad multiplies "
                    "(float32, float16, int8, mfma.bfloat16; int32 for i8 outputs)")


def numpy_dtype(code):
    return _NP[code]


def _f32_round_to_odd(x):
    """A float array as float32 rounded to odd (toward zero, the last bit
    set when anything was cut): float32 keeps 16 bits more than bfloat16,
    so rounding this to nearest even rounds x as if in one step, where
    going through float32's own nearest rounding could round twice."""
    d = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):  # beyond float32: inf, then its largest below
        f = d.astype("<f4")
    back = f.astype(np.float64)
    inexact = (back != d) & ~np.isnan(d)
    if inexact.any():
        toward_zero = np.where(np.abs(back) > np.abs(d), np.nextafter(f, np.float32(0)), f)
        f = (np.ascontiguousarray(toward_zero, dtype="<f4").view("<u4")
             | inexact.astype("<u4")).view("<f4")
    return f


def to_bf16(x):
    """float array -> mfma.bfloat16 array, rounding to nearest even (NaN
    stays NaN); float64 input is rounded once, not through float32's own
    rounding first."""
    a = np.asarray(x)
    if a.dtype in (np.float32, np.float16):
        f = np.ascontiguousarray(a, dtype="<f4")
    else:
        f = np.ascontiguousarray(_f32_round_to_odd(a), dtype="<f4")
    u = f.view("<u4").astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype("<u2")
    return rounded.view(bfloat16)


def from_bf16(x):
    """mfma.bfloat16 (or uint16 bf16 bits) array -> float32, exactly."""
    u = np.ascontiguousarray(x).view("<u2").astype("<u4") << 16
    return u.view("<f4")


def as_float(x):
    """A float64 view of any array mfma returns or takes (bf16 decoded)."""
    x = np.asarray(x)
    if x.dtype == bfloat16 or x.dtype.name == "bfloat16":
        return from_bf16(x).astype(np.float64)
    return x.astype(np.float64)
