"""mfma.Region: memory shared with the daemon (libmfmaclient's regions).

    with mfma.Client() as c, c.region(1 << 20) as r:
        b = r.array((1024, 16), np.float32)            # a numpy view of the region
        d = r.array((1024, 16), np.float32, offset=b.nbytes)
        b[:] = x
        c.gemm(None, b, weight="w", out=d)               # the daemon reads B, writes D here
        y = d.copy()

A region is a sealed memfd that libmfmaclient maps and registers with the
daemon over the Unix socket (never over TCP: mfma.FailedPrecondition).
Arrays made by array() view its pages without a copy; gemm()/submit() send
B and C that lie in a region of the same client as (region, offset,
length), and an out= array in one has the daemon write D there.

Lifetime: close() (or leaving the with block, or dropping the Region)
releases the region at once when no array views it any more: the daemon
unregisters it (once no request still uses it) and the pages are unmapped.
While arrays still view it, the release waits for the last of them to go,
so an array never points at unmapped memory; Region.released says whether
it has happened.  A submitted request holds its region arrays until its
answer, so it counts as a view too.  The Client's close() waits for the same before it lets
go of the connection."""

import ctypes
import sys
import weakref

import numpy as np

from . import dtypes

_TYPES = {}


def _memory_type(size):
    """A ctypes array type of `size` bytes, subclassed so that its instances
    take weak references (the release hangs on the last one's death)."""
    t = _TYPES.get(size)
    if t is None:
        t = type("RegionMemory", (ctypes.c_char * size,), {})
        if len(_TYPES) < 64:
            _TYPES[size] = t
    return t


def _dtype(dt):
    if isinstance(dt, str) and dt in ("f32", "f16", "bf16", "i8", "i32"):
        return dtypes.numpy_dtype(dtypes.code_of(dt))
    d = np.dtype(dt)
    return dtypes.bfloat16 if d.name == "bfloat16" else d


class Region:
    """Shared memory of `size` bytes (the size asked for, rounded up to the
    page size); made by Client.region(nbytes)."""

    def __init__(self, client, handle, address, size):
        self._client = client
        self.address = address
        self.size = size
        # Every array of this region has this object at the root of its
        # .base chain, so it lives exactly as long as the last view.
        self._mem = _memory_type(size).from_address(address)
        self._fin = weakref.finalize(self._mem, client._region_release, handle)
        # At interpreter exit the process ends and the kernel unmaps;
        # releasing earlier could pull pages from under an array still
        # used by another exit handler.
        self._fin.atexit = False

    def array(self, shape, dtype, offset=0):
        """A writable numpy array of `shape` and `dtype` over the region's
        bytes from `offset` on (no copy).  dtype: a numpy dtype, or "f32",
        "f16", "bf16", "i8", "i32" (mfma.bfloat16 for bf16)."""
        mem = self._mem
        if mem is None:
            raise ValueError("the region is closed: make arrays before close()")
        dt = _dtype(dtype)
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(x) for x in shape)
        if any(x < 0 for x in shape):
            raise ValueError(f"shape={shape} has a negative dimension")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        offset = int(offset)
        if offset < 0 or offset % dt.alignment:
            raise ValueError(f"offset={offset} must be a non-negative multiple of "
                             f"{dt.alignment} (the alignment of {dt})")
        if offset + count * dt.itemsize > self.size:
            raise ValueError(f"offset={offset} + shape {shape} of {dt} ({count * dt.itemsize} "
                             f"bytes) runs past the region's end ({self.size} bytes)")
        return np.frombuffer(mem, dtype=dt, count=count, offset=offset).reshape(shape)

    def holds(self, a):
        """True when the bytes of numpy array `a` lie inside this region
        (and it is not yet released)."""
        if not self._fin.alive or not isinstance(a, np.ndarray) or a.nbytes == 0:
            return False
        p = a.__array_interface__["data"][0]
        return self.address <= p and p + a.nbytes <= self.address + self.size

    @property
    def closed(self):
        """close() was called (or the client closed): no new arrays."""
        return self._mem is None

    @property
    def released(self):
        """The daemon has let go of the region and its pages are unmapped."""
        return not self._fin.alive

    def close(self):
        """Releases the region now when no array views it, and returns True;
        otherwise returns False and the release happens when the last such
        array is gone (nothing is unmapped under an array).  A failure of
        the daemon to unregister it is raised (the pages go regardless)."""
        mem, self._mem = self._mem, None
        if mem is None or not self._fin.alive:
            return not self._fin.alive
        # Two references are ours: `mem` here and getrefcount's argument
        # (the finalizer's is weak); any more is an array viewing it.
        if sys.getrefcount(mem) > 2:
            del mem
            return False
        exc = self._fin()  # released while `mem` still holds the object
        del mem
        if exc is not None:
            raise exc
        return True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "released" if self.released else "closed, viewed" if self.closed else "open"
        return f"<mfma.Region {self.size} bytes at {self.address:#x}, {state}>"
