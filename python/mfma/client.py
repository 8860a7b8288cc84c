"""mfma.Client: one connection to mfmad through libmfmaclient.

A Client may be shared by threads: calls on the connection take a lock, and
the answers of submit()ted requests are collected by one background thread
that sleeps on the socket (mfma_fileno) while nothing has arrived.

Shared-memory regions (Client.region, mfma.Region) live in region.py; here
is how GEMMs use them and how closing waits for their last array."""

import concurrent.futures
import contextlib
import ctypes
import dataclasses
import errno
import os
import select
import threading
import weakref
from dataclasses import dataclass, field

import numpy as np

from . import _lib, dtypes
from .errors import TransportError, from_c
from .region import Region
from .sparse import Sparse24

_SPARSITY = {None: _lib.SPARSITY_DENSE, "dense": _lib.SPARSITY_DENSE,
             "validate": _lib.SPARSITY_VALIDATE_24, "prune": _lib.SPARSITY_PRUNE_24}


@dataclass(frozen=True)
class WeightInfo:
    name: str
    rows: int
    cols: int
    dtype: str
    sparse: bool
    bytes: int
    devices: tuple
    # load_weight's alone: whether the daemon stored it so that a restart
    # restores it (None: the daemon does not store weights).
    stored: object = None


@dataclass(frozen=True)
class DeviceStatus:
    index: int
    backend: str
    arch: str
    name: str
    mem_total: int
    mem_used: int
    queue_depth: int
    in_flight: int
    variants: tuple
    completed: int
    failed: int
    # Kernel providers, each "name", "name:pinned" or "name:excluded".
    providers: tuple = ()
    # Where the device's worker thread has spent its time since the daemon
    # started, ns: {"idle", "prepare", "launch", "wait", "answers"}.
    worker_ns: dict = None
    # GEMMs the daemon's loop thread started on the idle device
    # (limits.loop_start), among completed and failed.
    loop_starts: int = 0
    # Why the device takes no work (it failed to open, or lost its context
    # since); "" while it serves.
    fault: str = ""


@dataclass(frozen=True)
class Status:
    version: str
    uptime_ns: int
    devices: list
    weights: list
    counters: dict
    weight_budget: int
    weight_bytes: int
    # The configuration's weights.declare: dicts of name, file, state
    # ("loading", "resident", "failed") and message.
    declared: list = ()


@dataclass(frozen=True)
class GemmInfo:
    """How one GEMM ran: the daemon's timing (ns), the device, the kernel
    variant and the client's round trip."""
    timing: dict
    device: tuple  # (index, backend, arch)
    variant: str
    round_trip_ns: int


class GemmFuture(concurrent.futures.Future):
    """A submitted GEMM: result() is its output array (the out= array when
    one was given); .info its GemmInfo once done.  Cancelling only stops
    waiting: the daemon still runs it."""

    def __init__(self, request_id):
        super().__init__()
        self.id = request_id
        self.info = None


def _weight(w):
    return WeightInfo(_lib.text(w.name), w.rows, w.cols, dtypes.NAME.get(w.dtype, "?"),
                      bool(w.sparse), w.bytes, tuple(w.devices[i] for i in range(w.n_devices)))


_DECLARED_STATE = {1: "loading", 2: "resident", 3: "failed"}


def _declared(w):
    return {"name": _lib.text(w.name), "file": _lib.text(w.file),
            "state": _DECLARED_STATE.get(w.state, "unknown"), "message": _lib.text(w.message)}


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _from_torch(t):
    import torch
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(dtypes.bfloat16)
    return t.numpy()


def _to_torch(a):
    import torch
    if a.dtype == dtypes.bfloat16:
        return torch.from_numpy(a.view("<i2")).view(torch.bfloat16)
    return torch.from_numpy(a)


class _Wake:
    """The pipe that wakes a client's collecting thread.  Any thread sets
    it; its read end is drained, and the pipe closed, by the collecting
    thread alone (by Client.close() when there is none).  A pipe closed by
    another thread while the collecting thread was about to wait on it had
    its numbers taken by the next client's pipe: two threads then read one
    pipe, and the one that lost the byte of close() slept on forever."""

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.r, False)
        os.set_blocking(self.w, False)
        self._lock = threading.Lock()

    def set(self):
        with self._lock:
            if self.w >= 0:
                try:
                    os.write(self.w, b"w")
                except BlockingIOError:
                    pass  # full: set already

    def drain(self):
        try:
            os.read(self.r, 4096)
        except BlockingIOError:
            pass

    def close(self):
        with self._lock:
            if self.r >= 0:
                os.close(self.r)
                os.close(self.w)
                self.r = self.w = -1


def _collect(ref, wake):
    """The background thread of a client that submitted: hands each answer
    to its future (Client._collect_once) and sleeps until the socket or
    the wake pipe has something.  It holds the client only by ref during a
    turn, so that an unclosed client is still collected; it ends when the
    client closes or is gone, and closes the wake pipe then."""
    try:
        while True:
            c = ref()
            if c is None:
                return
            try:
                turn = c._collect_once()
            except Exception:  # noqa: BLE001 - the thread must not die
                turn = [wake.r], 0.1
            if c._closing:
                return  # closed from a done-callback of this turn
            del c  # the last reference: __del__ closes it here
            if turn is None or ref() is None:
                return
            watch, timeout = turn
            try:
                ready, _, _ = select.select(watch, [], [], timeout)
                if wake.r in ready:
                    wake.drain()
            except (OSError, ValueError):
                pass  # the connection closed under the wait: the next turn says
    finally:
        wake.close()


class Client:
    """Client(endpoint=None, *, timeout_ms=None, copy_strided=True, token=None,
              tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None,
              spin_us=None)

    endpoint: "unix:PATH", "tcp:HOST:PORT", "tls:HOST:PORT" (TCP with TLS), a
    socket path, or a comma list of them (failover); None means
    $MFMA_ENDPOINT, else the default sockets ($XDG_RUNTIME_DIR/mfmad.sock,
    then /run/mfmad/mfmad.sock).  timeout_ms bounds every wait for the
    daemon, connecting included.  token (str or bytes): sent first, for a TCP listener with
    listen.token_file; None reads the first line of $MFMA_TOKEN_FILE when
    that is set.  tls_ca, tls_cert, tls_key (file paths, PEM) are for tls:
    endpoints: the CAs the daemon's certificate must chain to, and this
    client's certificate and key; None takes $MFMA_TLS_CA, $MFMA_TLS_CERT,
    $MFMA_TLS_KEY (and the system's CAs without either).  tls_server_name is
    the name the daemon's certificate must carry (default: each endpoint's
    host).  Arrays that are not C-contiguous little-endian (slices with a
    step, transposes, big-endian data) are copied into row-major order when
    copy_strided is true, and refused with ValueError when it is false;
    they are never sent as they lie in memory.

    spin_us (0 to 1000000; None: $MFMA_SPIN_US, else 0): before a blocking
    call's wait for the daemon sleeps, the library polls the socket without
    sleeping that many microseconds (mfma_set_spin_us), which saves a
    thread wake-up per round trip where a core is free and costs one where
    none is.  The futures of submit() are collected by a thread that waits
    in select() and does not spin.

    On a Unix socket, region(nbytes) gives memory shared with the daemon
    (mfma.Region): B and C arrays in it are not sent, and out= in it has
    the daemon write D there."""

    def __init__(self, endpoint=None, *, timeout_ms=None, copy_strided=True, token=None,
                 tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None,
                 spin_us=None):
        self._h = None
        self._closed = False
        self.copy_strided = copy_strided
        if spin_us is not None and not 0 <= int(spin_us) <= _lib.SPIN_US_MAX:
            raise ValueError(f"spin_us={spin_us} is not from 0 to {_lib.SPIN_US_MAX}")
        if token is None and os.environ.get("MFMA_TOKEN_FILE"):
            # Before connecting: a file that cannot be read leaves nothing open.
            with open(os.environ["MFMA_TOKEN_FILE"], "rb") as f:
                token = f.readline().rstrip(b"\r\n")
        h = _lib.client_p()
        err = _lib.Error_()
        tls = _lib.Tls(*(os.fsencode(v) if v is not None else None
                         for v in (tls_ca, tls_cert, tls_key, tls_server_name)))
        # timeout_ms bounds the connection too (its TLS handshake included).
        rc = _lib.mfma_connect_timeout(endpoint.encode() if endpoint else None,
                                       ctypes.byref(tls),
                                       int(timeout_ms) if timeout_ms is not None else -1,
                                       ctypes.byref(h), ctypes.byref(err))
        if rc < 0:
            raise from_c(rc, err)
        self._h = h
        if timeout_ms is not None:
            _lib.mfma_set_timeout(h, int(timeout_ms))
        if spin_us is not None:
            _lib.mfma_set_spin_us(h, int(spin_us))  # in range: checked above
        if token is not None:
            tok = token.encode() if isinstance(token, str) else bytes(token)
            rc = _lib.mfma_authenticate(h, tok, len(tok), ctypes.byref(err))
            if rc < 0:
                # mfma_authenticate closed the connection on a wrong token.
                self._h = None
                _lib.mfma_close(h)
                raise from_c(rc, err)
        # Reentrant: a region's release may run (its last array dropped) in
        # a thread that holds the lock between two library calls.
        self._lock = threading.RLock()
        self._futures = {}
        self._regions = weakref.WeakSet()  # Region objects, for close()
        self._live = set()  # handles of regions not yet released
        self._weight_rows = {}  # name -> M, to check out= of a resident weight
        self._pump = None
        self._corked = False
        self._closing = False
        self._wake_pipe = _Wake()
        self.last_info = None

    # ---- lifetime ----

    def close(self):
        """Closes the connection; submitted requests not yet answered fail
        with TransportError (ECANCELED).  Its regions are closed too; while
        an array still views one, the connection (which maps the region's
        pages) is let go only when the last such array is gone."""
        if self._h is None or self._closed:
            return
        self._closed = True
        self._closing = True
        self._wake()
        # From a future's done-callback this is the collecting thread
        # itself: it ends when the callback returns.
        if self._pump is not None and self._pump is not threading.current_thread():
            self._pump.join()
        for r in list(self._regions):
            r._mem = None  # released now unless an array views it
        with self._lock:
            pending, self._futures = self._futures, {}
        for fut, *_ in pending.values():
            if not fut.done():
                fut.set_exception(TransportError(-errno.ECANCELED, "the client was closed"))
        del pending  # the requests' region arrays: their releases may run now
        with self._lock:
            self._finish_close()
        if self._pump is None:
            self._wake_pipe.close()  # else the collecting thread closes it as it ends

    def _finish_close(self):
        """mfma_close once close() was called and no region is left (its
        pages are unmapped with the connection).  Under the lock."""
        if self._closed and self._h is not None and not self._live:
            _lib.mfma_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def endpoint(self):
        return _lib.text(_lib.mfma_endpoint(self._handle()))

    @property
    def spin_us(self):
        """The spin window in microseconds (0: off); see the class."""
        return _lib.mfma_spin_us(self._handle())

    def _handle(self):
        if self._h is None or self._closed:
            raise TransportError(-errno.EBADF, "the client is closed")
        return self._h

    def _call(self, fn, *args):
        err = _lib.Error_()
        with self._lock:
            rc = fn(self._handle(), *args, ctypes.byref(err))
        if self._futures:
            self._wake()  # it may have read answers the pump waits for
        if rc < 0:
            raise from_c(rc, err)
        return rc

    # ---- operands ----

    def _array(self, x, what):
        if _is_torch(x):
            x = _from_torch(x)
        a = np.asarray(x)
        if a.dtype.name == "bfloat16":  # ml_dtypes
            a = a.view("<u2").view(dtypes.bfloat16)
        if a.ndim != 2:
            raise ValueError(f"{what} must be a 2-D matrix, not {a.ndim}-D {a.shape}")
        code = dtypes.code_of(a.dtype)
        want = dtypes.numpy_dtype(code)
        if not a.flags.c_contiguous or a.dtype != want:
            if not self.copy_strided:
                raise ValueError(
                    f"{what} is not a C-contiguous little-endian array (shape {a.shape}, "
                    f"strides {a.strides}, dtype {a.dtype.str}): it cannot be sent as it lies "
                    f"in memory; pass np.ascontiguousarray({what}) or use copy_strided=True")
            a = np.ascontiguousarray(a, dtype=want)
        return a, code

    @staticmethod
    def _matrix(a, code):
        return _lib.Matrix(a.shape[0], a.shape[1], code, a.ctypes.data, a.nbytes)

    def _operand(self, a, sparse, keep):
        op = _lib.Operand()
        if isinstance(a, Sparse24):
            if sparse not in (None, "compressed"):
                raise ValueError(f"sparse={sparse!r} does not apply to an already 2:4 "
                                 "(mfma.Sparse24) operand")
            rows, cols = a.shape
            keep += [a.values, a.meta]
            op.kind = _lib.OPERAND_SPARSE24
            op.sparse = _lib.Sparse24(rows, cols, dtypes.code_of(a.values.dtype),
                                      a.values.ctypes.data, a.values.nbytes,
                                      ctypes.cast(a.meta.ctypes.data,
                                                  ctypes.POINTER(ctypes.c_uint32)),
                                      a.meta.nbytes)
            return op, op.sparse.dtype
        if sparse not in _SPARSITY:
            raise ValueError(f"sparse={sparse!r}: use None, 'validate' or 'prune' "
                             "(or pass an mfma.Sparse24)")
        arr, code = self._array(a, "a")
        keep.append(arr)
        op.kind = _lib.OPERAND_DENSE
        op.dense = self._matrix(arr, code)
        op.sparsity = _SPARSITY[sparse]
        return op, code

    def _rows_of(self, weight):
        """M of a resident weight, from what this client last saw of it
        (one listing when it has seen nothing); None when unknown."""
        if weight not in self._weight_rows:
            self.weights()
        return self._weight_rows.get(weight)

    def _out(self, out, args, bcode, m, n, keep):
        """Checks out= against D (m x n; m None when unknown) and, when it
        lies in a region of this client, has the daemon write D there."""
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out= must be a numpy array, not {type(out).__name__} "
                            "(for a torch tensor pass tensor.numpy())")
        code = args.out_dtype or (_lib.TYPE_I32 if bcode == _lib.TYPE_I8 else _lib.TYPE_F32)
        want = dtypes.numpy_dtype(code)
        if out.dtype != want:
            raise ValueError(f"out is {out.dtype}, but D will be {dtypes.NAME[code]} ({want}); "
                             "give out= of that dtype, or out_dtype= to match it")
        if out.ndim != 2 or (m is not None and out.shape[0] != m) or out.shape[1] != n:
            raise ValueError(f"out has shape {out.shape}, but D is "
                             f"{'?' if m is None else m}x{n}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError(f"out must be a writable C-contiguous array (strides "
                             f"{out.strides}, writeable={out.flags.writeable})")
        keep.append(out)
        # Only a region's D goes straight to out=: the library copies a
        # D that travelled in the frame without knowing out's size (a
        # weight's M is the daemon's), so _take copies that one instead,
        # after checking the shape.
        if self._in_region(out):
            args.d = out.ctypes.data
            args.d_bytes = out.nbytes

    def _gemm_args(self, a, b, sparse, c, alpha, beta, out_dtype, weight, device, priority,
                   timeout_us, out=None):
        keep = []
        args = _lib.GemmArgs()
        _lib.mfma_gemm_args_init(ctypes.byref(args))
        torch_out = any(_is_torch(x) for x in (a, b, c) if x is not None)
        if weight is not None:
            if a is not None:
                raise ValueError("give a or weight=, not both")
            if sparse is not None:
                raise ValueError("sparse= applies to a; a weight's sparsity was chosen when "
                                 "it was loaded")
            name = weight.encode()
            keep.append(name)
            args.a.kind = _lib.OPERAND_WEIGHT
            args.a.weight = name
        elif a is None:
            raise ValueError("a is required (or weight=NAME)")
        else:
            args.a, _ = self._operand(a, sparse, keep)
        bb, bcode = self._array(b, "b")
        keep.append(bb)
        args.b = self._matrix(bb, bcode)
        if out_dtype is not None:
            args.out_dtype = dtypes.code_of(out_dtype)
        if c is not None:
            cc, ccode = self._array(c, "c")
            keep.append(cc)
            cm = self._matrix(cc, ccode)
            keep.append(cm)
            args.c = ctypes.pointer(cm)
        args.alpha = float(alpha)
        args.beta = float(beta)
        args.device = int(device)
        args.priority = int(priority)
        args.timeout_us = int(timeout_us)
        if out is not None:
            m = (self._rows_of(weight) if weight is not None
                 else a.shape[0] if isinstance(a, Sparse24) else args.a.dense.rows)
            self._out(out, args, bcode, m, bb.shape[1], keep)
        return args, keep, torch_out

    def _take(self, res, out=None):
        """The library's answer as numpy (out= when given: written there by
        the daemon, or copied there) and its description; an exception
        instead of the array when out= does not fit the daemon's D."""
        d = res.d
        exc = None
        if out is None:
            out = np.empty((d.rows, d.cols), dtype=dtypes.numpy_dtype(d.dtype))
            if d.bytes:
                ctypes.memmove(out.ctypes.data, d.data, min(d.bytes, out.nbytes))
        elif (d.rows, d.cols) != out.shape or dtypes.numpy_dtype(d.dtype) != out.dtype:
            # Only a resident weight replaced since _rows_of looked can do
            # this (out= outside a region: in one, d_bytes lets the daemon
            # refuse a D of another size before it writes).
            self._weight_rows.clear()
            where = " (written into the region from out's first byte)" if d.data else ""
            exc = ValueError(f"the daemon's D is {d.rows}x{d.cols} {dtypes.NAME[d.dtype]}"
                             f"{where}, but out is {out.shape} {out.dtype}: was the weight "
                             "replaced?")
        elif d.bytes and d.data != out.ctypes.data:
            ctypes.memmove(out.ctypes.data, d.data, out.nbytes)
        t = res.timing
        info = GemmInfo({k: getattr(t, k) for k, _ in _lib.Timing._fields_},
                        (res.device.index, _lib.text(res.device.backend),
                         _lib.text(res.device.arch)),
                        _lib.text(res.variant), res.round_trip_ns)
        return (None if exc else out), info, exc

    # ---- shared-memory regions ----

    def region(self, nbytes):
        """Memory of nbytes (rounded up to the page size) shared with the
        daemon: an mfma.Region, a context manager whose array() views it.
        Unix socket only (mfma.FailedPrecondition over TCP); the daemon's
        limits.max_regions_per_conn, max_region_mb_per_conn and
        max_pinned_mb bound it (mfma.ResourceExhausted naming the limit)."""
        n = int(nbytes)
        if n < 1:
            raise ValueError(f"nbytes={nbytes} must be at least 1")
        rg = _lib.region_p()
        self._call(_lib.mfma_region_create, n, ctypes.byref(rg))
        with self._lock:
            r = Region(self, rg.value, _lib.mfma_region_data(rg), _lib.mfma_region_size(rg))
            self._live.add(rg.value)
            self._regions.add(r)
        return r

    def _region_release(self, handle):
        """The finalizer of a region's memory (run when it is closed and no
        array views it): unregisters and unmaps it; returns the error, if
        any, for Region.close() to raise (a finalizer cannot)."""
        err = _lib.Error_()
        rc = 0
        with self._lock:
            if self._h is not None:
                rc = _lib.mfma_region_destroy(self._h, handle, ctypes.byref(err))
            self._live.discard(handle)
            self._finish_close()
        return from_c(rc, err) if rc < 0 else None

    def _in_region(self, a):
        return any(r.holds(a) for r in list(self._regions))

    # ---- GEMM ----

    def gemm(self, a, b, *, sparse=None, c=None, alpha=1.0, beta=0.0, out_dtype=None,
             weight=None, device=-1, priority=0, timeout_us=0, out=None):
        """D = alpha * A.B + beta * C on the daemon; returns D (numpy, or a
        torch tensor when an input was one).

        a: M x K (float32, float16, mfma.bfloat16 or int8), or an
        mfma.Sparse24, or None with weight="NAME" (a resident weight).
        sparse: None (A as it is), "validate" (refuse unless A is 2:4) or
        "prune" (keep the two largest of every 4 along K).  b: K x N of A's
        dtype.  c: M x N in the output dtype.  out_dtype: None (float32 for
        float inputs, int32 for int8), or the input's own 16-bit type.
        out: an M x N C-contiguous numpy array of the output dtype to
        receive D, returned; inside a region of this client (and b, c
        there too) the daemon reads and writes the region and no matrix
        byte is in the frames.  The timing of the call is in
        self.last_info.

        A call that fails once sent (a timeout among them) may leave the
        daemon still to run it: b and c in a region may still be read, and
        out there written, until it has; Region.close() returns only once
        the daemon no longer uses the region."""
        args, keep, torch_out = self._gemm_args(a, b, sparse, c, alpha, beta, out_dtype,
                                                weight, device, priority, timeout_us, out)
        res = _lib.GemmResult()
        err = _lib.Error_()
        with self._lock:
            rc = _lib.mfma_gemm(self._handle(), ctypes.byref(args), ctypes.byref(res),
                                ctypes.byref(err))
            if rc == 0:
                d, info, exc = self._take(res, out)
                _lib.mfma_gemm_result_free(ctypes.byref(res))
        del keep
        if self._futures:
            self._wake()
        if rc < 0:
            raise from_c(rc, err)
        self.last_info = info
        if exc is not None:
            raise exc
        return _to_torch(d) if torch_out and out is None else d

    def submit(self, a, b, **kw):
        """Sends a GEMM without waiting; returns a GemmFuture.  Takes the
        arguments of gemm().  Any number may be in flight on one client; the
        inputs may be reused as soon as submit returns, except those in a
        region: the daemon reads B and C there, so they must not change
        until the future is done (and out= holds D only then)."""
        out = kw.pop("out", None)
        args, keep, torch_out = self._gemm_args(
            a, b, kw.pop("sparse", None), kw.pop("c", None), kw.pop("alpha", 1.0),
            kw.pop("beta", 0.0), kw.pop("out_dtype", None), kw.pop("weight", None),
            kw.pop("device", -1), kw.pop("priority", 0), kw.pop("timeout_us", 0), out)
        if kw:
            raise TypeError(f"submit() got unexpected arguments {sorted(kw)}")
        rid = ctypes.c_uint64()
        err = _lib.Error_()
        with self._lock:
            rc = _lib.mfma_gemm_submit(self._handle(), ctypes.byref(args), ctypes.byref(rid),
                                       ctypes.byref(err))
            if rc == 0:
                fut = GemmFuture(rid.value)
                # Region arrays stay referenced until the answer, so their
                # region is not released under the request.
                held = [x for x in keep if isinstance(x, np.ndarray) and self._in_region(x)]
                self._futures[rid.value] = (fut, torch_out and out is None, out, held)
                if self._pump is None:
                    # By a weak reference: a client dropped unclosed is
                    # still collected (and closed by __del__).
                    self._pump = threading.Thread(target=_collect,
                                                  args=(weakref.ref(self), self._wake_pipe),
                                                  name="mfma-collect", daemon=True)
                    self._pump.start()
        del keep
        if rc < 0:
            raise from_c(rc, err)
        if not self._corked:
            self._wake()
        return fut

    @contextlib.contextmanager
    def corked(self):
        """A block whose submit() calls are held in the library and written
        together, in one call, when it ends (mfma_cork): for a client that
        submits many requests at a time, one system call and one wake-up of
        the daemon for all of them.  Any thread's submits on this client
        are held meanwhile; a blocking call (gemm(), status(), ...) in the
        block writes what is held first, in order.  Answers to earlier
        requests are collected after the block."""
        with self._lock:
            _lib.mfma_cork(self._handle())
            self._corked = True
        err = _lib.Error_()
        try:
            yield self
        finally:
            with self._lock:
                self._corked = False
                rc = _lib.mfma_uncork(self._h, ctypes.byref(err)) if self._h is not None else 0
            self._wake()
        if rc < 0:
            raise from_c(rc, err)

    def _wake(self):
        self._wake_pipe.set()

    def _collect_once(self):
        """One turn of the collecting thread (_collect): hands each answer
        already there to its future.  What to wait on next: (fds, timeout),
        or None when the client is closing.  Its locals (the answers, their
        region arrays) are gone when it returns, before the thread sleeps."""
        if self._closing:
            return None
        done = []
        broken = None
        with self._lock:
            # Corked, a wait would write the held requests: the block's
            # end wakes this thread.
            corked = self._corked
            while self._futures and not corked:
                res = _lib.GemmResult()
                err = _lib.Error_()
                did = ctypes.c_uint64()
                rc = _lib.mfma_wait(self._h, _lib.ANY, 0, ctypes.byref(did),
                                    ctypes.byref(res), ctypes.byref(err))
                if rc == -errno.ETIMEDOUT:
                    break
                if rc == 0:
                    entry = self._futures.pop(did.value, None)
                    out, info, exc = self._take(res, entry[2] if entry else None)
                    _lib.mfma_gemm_result_free(ctypes.byref(res))
                    done.append((entry, out, info, exc))
                elif rc <= -_lib.EREMOTE_BASE:
                    done.append((self._futures.pop(did.value, None), None, None,
                                 from_c(rc, err)))
                else:
                    broken = from_c(rc, err)
                    # The library keeps a GEMM whose connection was lost
                    # and sends it again on the next one (the daemon
                    # restarted, or another endpoint of a list), and
                    # completes it with DEADLINE_EXCEEDED if none comes in
                    # time; a later wait reconnects.  What it no longer
                    # holds fails now.
                    if _lib.mfma_in_flight(self._h) == 0:
                        done += [(f, None, None, broken) for f in self._futures.values()]
                        self._futures = {}
                    break
            idle = not self._futures
            fd = _lib.mfma_fileno(self._h)
        for entry, out, info, exc in done:
            if entry is None:
                continue
            fut, torch_out = entry[:2]
            try:
                if fut.cancelled():
                    continue
                if exc is not None:
                    fut.set_exception(exc)
                else:
                    fut.info = info
                    fut.set_result(_to_torch(out) if torch_out else out)
            except concurrent.futures.InvalidStateError:
                pass  # cancelled between the check and the result
        if idle or corked:
            return [self._wake_pipe.r], None
        if fd < 0 or broken is not None:
            # No connection now: try again soon (each wait reconnects).
            return [self._wake_pipe.r], 0.1
        return [self._wake_pipe.r, fd], 1.0

    # ---- weights, status ----

    def load_weight(self, name, a, *, sparse=None, device=-1, replace=False):
        """Makes `a` resident under `name` (on every device, or `device`);
        sparse as for gemm(), or an mfma.Sparse24.  Returns its WeightInfo."""
        keep = []
        la = _lib.LoadArgs()
        _lib.mfma_load_args_init(ctypes.byref(la))
        bname = name.encode()
        la.name = bname
        la.a, _ = self._operand(a, sparse, keep)
        la.device = int(device)
        la.replace = bool(replace)
        res = _lib.LoadResult()
        err = _lib.Error_()
        with self._lock:
            rc = _lib.mfma_load_weight(self._handle(), ctypes.byref(la), ctypes.byref(res),
                                       ctypes.byref(err))
            if rc == 0:
                stored = _lib.mfma_load_result_stored(ctypes.byref(res))
                info = dataclasses.replace(_weight(res.weight),
                                           stored=None if stored < 0 else bool(stored))
                _lib.mfma_load_result_free(ctypes.byref(res))
        if rc < 0:
            raise from_c(rc, err)
        self._weight_rows[info.name] = info.rows
        return info

    def unload_weight(self, name):
        """Frees the resident weight `name` (mfma.NotFound when there is
        none); returns once its memory is back in the budget."""
        self._call(_lib.mfma_unload_weight, name.encode())
        self._weight_rows.pop(name, None)

    def weights(self):
        """The resident weights, as a list of WeightInfo."""
        wl = _lib.WeightList()
        err = _lib.Error_()
        with self._lock:
            rc = _lib.mfma_list_weights(self._handle(), ctypes.byref(wl), ctypes.byref(err))
            if rc == 0:
                out = [_weight(wl.weights[i]) for i in range(wl.n_weights)]
                _lib.mfma_weight_list_free(ctypes.byref(wl))
        if rc < 0:
            raise from_c(rc, err)
        self._weight_rows = {w.name: w.rows for w in out}
        return out

    def status(self):
        """Devices, weights and counters of the daemon (a Status)."""
        st = _lib.Status()
        err = _lib.Error_()
        with self._lock:
            rc = _lib.mfma_status(self._handle(), ctypes.byref(st), ctypes.byref(err))
            if rc == 0:
                devs = []
                for i in range(st.n_devices):
                    d = st.devices[i]
                    devs.append(DeviceStatus(
                        d.index, _lib.text(d.backend), _lib.text(d.arch), _lib.text(d.name),
                        d.mem_total, d.mem_used, d.queue_depth, d.in_flight,
                        tuple(_lib.text(d.variants[j]) for j in range(d.n_variants)),
                        d.completed, d.failed,
                        tuple(_lib.text(d.providers[j]) for j in range(d.n_providers)),
                        {p: getattr(d, "worker_%s_ns" % p)
                         for p in ("idle", "prepare", "launch", "wait", "answers")},
                        d.loop_starts, _lib.text(d.fault)))
                out = Status(_lib.text(st.version), st.uptime_ns, devs,
                             [_weight(st.weights[i]) for i in range(st.n_weights)],
                             {k: getattr(st.counters, k) for k, _ in _lib.Counters._fields_},
                             st.weight_budget, st.weight_bytes,
                             [_declared(st.declared[i]) for i in range(st.n_declared)])
                _lib.mfma_status_free(ctypes.byref(st))
        if rc < 0:
            raise from_c(rc, err)
        return out

    def ping(self, payload=b""):
        """Round trip of `payload` through the daemon, in nanoseconds."""
        rt = ctypes.c_uint64()
        self._call(_lib.mfma_ping, payload, len(payload), ctypes.byref(rt))
        return rt.value
