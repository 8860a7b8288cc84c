"""The canonical 2:4 format (kernels/common/sparse24.h), through the
library's own codec, so what is compressed here is exactly what the daemon
reads.

Of every group of 4 along a row, the two kept values in position order go to
`values` (rows x cols/2) and their positions i0 < i1 to `meta` as the nibble
i0 | i1 << 2, eight groups per little-endian uint32, each row starting a new
word (rows x ceil(cols/32) uint32)."""

import ctypes
from dataclasses import dataclass

import numpy as np

from . import _lib, dtypes
from .errors import from_c


@dataclass(frozen=True)
class Sparse24:
    """A 2:4 matrix of logical shape (rows, cols) in the canonical format."""
    values: np.ndarray  # rows x cols/2, the matrix's dtype
    meta: np.ndarray    # rows x ceil(cols/32), uint32
    shape: tuple

    @property
    def dtype(self):
        return self.values.dtype

    def to_dense(self):
        """The dense rows x cols matrix (zeros where nothing was kept)."""
        rows, cols = self.shape
        out = np.zeros((rows, cols), dtype=self.values.dtype)
        err = _lib.Error_()
        rc = _lib.mfma_sparse24_decompress(self.values.ctypes.data, self.meta.ctypes.data,
                                           dtypes.code_of(self.values.dtype), rows, cols,
                                           out.ctypes.data, ctypes.byref(err))
        if rc < 0:
            raise ValueError(_lib.text(err.message))
        return out

    def __post_init__(self):
        rows, cols = self.shape
        if self.values.shape != (rows, cols // 2) or not self.values.flags.c_contiguous:
            raise ValueError(f"2:4 values must be a C-contiguous {rows}x{cols // 2} array, "
                             f"not {self.values.shape}")
        words = (cols // 4 + 7) // 8
        if (self.meta.dtype != np.dtype("<u4") or self.meta.shape != (rows, words)
                or not self.meta.flags.c_contiguous):
            raise ValueError(f"2:4 meta must be a C-contiguous {rows}x{words} uint32 array, "
                             f"not {self.meta.shape} {self.meta.dtype}")


def _dense_input(a):
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"a 2:4 matrix must be 2-D, not {a.ndim}-D")
    code = dtypes.code_of(a.dtype)
    if code == _lib.TYPE_I32:
        raise TypeError("int32 is an output type; 2:4 takes float32, float16, bf16 or int8")
    if a.shape[1] % 4 != 0:
        raise ValueError(f"cols={a.shape[1]} is not a multiple of 4")
    return np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<") if a.dtype.byteorder == ">"
                                else a.dtype), code


def _run(fn, a):
    a, code = _dense_input(a)
    rows, cols = a.shape
    values = np.empty((rows, cols // 2), dtype=a.dtype)
    meta = np.empty((rows, (cols // 4 + 7) // 8), dtype="<u4")
    err = _lib.Error_()
    rc = fn(a.ctypes.data, code, rows, cols, values.ctypes.data, meta.ctypes.data,
            ctypes.byref(err))
    if rc < 0:
        if rc == -22:
            raise ValueError(_lib.text(err.message))
        raise from_c(rc, err)
    return Sparse24(values, meta, (rows, cols))


def prune(a):
    """Keeps the two largest magnitudes of every group of 4 along each row
    (ties to the lower position) and compresses: what the daemon does under
    sparse="prune"."""
    return _run(_lib.mfma_sparse24_prune, a)


def compress(a):
    """Compresses a matrix that already is 2:4; ValueError naming the first
    row and group with more than two non-zeros otherwise."""
    return _run(_lib.mfma_sparse24_compress, a)


def prune_dense(a):
    """The dense matrix the daemon multiplies when asked to prune `a`."""
    return prune(a).to_dense()
