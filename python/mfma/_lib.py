"""ctypes declarations of libmfmaclient (mfma.h).  Nothing else in the
package knows the C layout; the structs below follow mfma.h field by
field."""

import ctypes
import ctypes.util
import os

from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_size_t, c_uint32, c_uint64, c_void_p)

SONAME = "libmfmaclient.so.0"

TYPE_NONE, TYPE_F32, TYPE_F16, TYPE_BF16, TYPE_I8, TYPE_I32 = range(6)
OPERAND_DENSE, OPERAND_SPARSE24, OPERAND_WEIGHT = range(3)
SPARSITY_DENSE, SPARSITY_VALIDATE_24, SPARSITY_PRUNE_24 = range(3)
EREMOTE_BASE = 10000
ANY = (1 << 64) - 1
ERROR_MAX = 512


class Error_(Structure):
    _fields_ = [("code", c_int), ("message", c_char * ERROR_MAX)]


class Tls(Structure):
    _fields_ = [("ca_file", c_char_p), ("cert_file", c_char_p), ("key_file", c_char_p),
                ("server_name", c_char_p)]


class Matrix(Structure):
    _fields_ = [("rows", c_uint32), ("cols", c_uint32), ("dtype", c_int),
                ("data", c_void_p), ("bytes", c_size_t)]


class Sparse24(Structure):
    _fields_ = [("rows", c_uint32), ("cols", c_uint32), ("dtype", c_int),
                ("values", c_void_p), ("values_bytes", c_size_t),
                ("meta", POINTER(c_uint32)), ("meta_bytes", c_size_t)]


class Operand(Structure):
    _fields_ = [("kind", c_int), ("dense", Matrix), ("sparsity", c_int),
                ("sparse", Sparse24), ("weight", c_char_p)]


class GemmArgs(Structure):
    _fields_ = [("a", Operand), ("b", Matrix), ("c", POINTER(Matrix)),
                ("alpha", c_float), ("beta", c_float), ("out_dtype", c_int),
                ("device", c_int), ("priority", c_uint32), ("timeout_us", c_uint64),
                ("d", c_void_p), ("d_bytes", c_size_t)]


class Timing(Structure):
    _fields_ = [("queue_ns", c_uint64), ("h2d_ns", c_uint64), ("kernel_ns", c_uint64),
                ("d2h_ns", c_uint64), ("total_ns", c_uint64), ("prep_ns", c_uint64),
                ("batch_requests", c_uint32), ("batch_columns", c_uint32)]


class DeviceRef(Structure):
    _fields_ = [("index", c_uint32), ("backend", c_char_p), ("arch", c_char_p)]


class ClientTiming(Structure):
    _fields_ = [("encode_ns", c_uint64), ("send_ns", c_uint64), ("wait_ns", c_uint64),
                ("decode_ns", c_uint64)]


class GemmResult(Structure):
    _fields_ = [("d", Matrix), ("timing", Timing), ("device", DeviceRef),
                ("variant", c_char_p), ("round_trip_ns", c_uint64), ("client", ClientTiming),
                ("priv", c_void_p)]


class WeightInfo(Structure):
    _fields_ = [("name", c_char_p), ("rows", c_uint32), ("cols", c_uint32),
                ("dtype", c_int), ("sparse", c_bool), ("bytes", c_uint64),
                ("n_devices", c_size_t), ("devices", POINTER(c_uint32)),
                ("requests", c_uint64), ("launches", c_uint64)]


class LoadArgs(Structure):
    _fields_ = [("name", c_char_p), ("a", Operand), ("device", c_int), ("replace", c_bool)]


class LoadResult(Structure):
    _fields_ = [("weight", WeightInfo), ("priv", c_void_p)]


class DeclaredWeight(Structure):
    _fields_ = [("name", c_char_p), ("file", c_char_p), ("state", c_int),
                ("message", c_char_p)]


class WeightList(Structure):
    _fields_ = [("n_weights", c_size_t), ("weights", POINTER(WeightInfo)),
                ("priv", c_void_p), ("n_declared", c_size_t),
                ("declared", POINTER(DeclaredWeight))]


class DeviceStatus(Structure):
    _fields_ = [("index", c_uint32), ("backend", c_char_p), ("arch", c_char_p),
                ("name", c_char_p), ("mem_total", c_uint64), ("mem_used", c_uint64),
                ("queue_depth", c_uint32), ("in_flight", c_uint32),
                ("n_variants", c_size_t), ("variants", POINTER(c_char_p)),
                ("completed", c_uint64), ("failed", c_uint64),
                ("n_providers", c_size_t), ("providers", POINTER(c_char_p)),
                ("worker_idle_ns", c_uint64), ("worker_prepare_ns", c_uint64),
                ("worker_launch_ns", c_uint64), ("worker_wait_ns", c_uint64),
                ("worker_answers_ns", c_uint64), ("loop_starts", c_uint64),
                ("fault", c_char_p)]


class Counters(Structure):
    _fields_ = [("requests", c_uint64), ("ok", c_uint64), ("failed", c_uint64),
                ("busy", c_uint64), ("connections_open", c_uint64),
                ("connections_total", c_uint64), ("in_flight", c_uint64),
                ("malformed", c_uint64)]


class Status(Structure):
    _fields_ = [("version", c_char_p), ("uptime_ns", c_uint64),
                ("n_devices", c_size_t), ("devices", POINTER(DeviceStatus)),
                ("n_weights", c_size_t), ("weights", POINTER(WeightInfo)),
                ("counters", Counters), ("weight_budget", c_uint64),
                ("weight_bytes", c_uint64), ("priv", c_void_p),
                ("n_declared", c_size_t), ("declared", POINTER(DeclaredWeight))]


def _candidates():
    """Where the library is looked for, in order: $MFMA_CLIENT_LIB (set by
    meson test), next to the package, the libdir it was installed with,
    then the dynamic loader's own search."""
    env = os.environ.get("MFMA_CLIENT_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, SONAME)
    try:
        from . import _paths  # written by meson at install
        yield os.path.join(_paths.LIBDIR, SONAME)
    except ImportError:
        pass
    yield SONAME
    found = ctypes.util.find_library("mfmaclient")
    if found:
        yield found


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: not there")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(str(e))
    raise ImportError("mfma: cannot load libmfmaclient (set MFMA_CLIENT_LIB to its path): "
                      + "; ".join(errors))


lib = _load()
client_p = c_void_p
err_p = POINTER(Error_)


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


mfma_version = _fn("mfma_version", c_char_p)
mfma_code_name = _fn("mfma_code_name", c_char_p, c_int)
mfma_connect = _fn("mfma_connect", c_int, c_char_p, POINTER(client_p), err_p)
mfma_connect_tls = _fn("mfma_connect_tls", c_int, c_char_p, POINTER(Tls), POINTER(client_p),
                       err_p)
mfma_connect_timeout = _fn("mfma_connect_timeout", c_int, c_char_p, POINTER(Tls), c_int,
                           POINTER(client_p), err_p)
mfma_close = _fn("mfma_close", None, client_p)
mfma_authenticate = _fn("mfma_authenticate", c_int, client_p, c_char_p, c_size_t, err_p)
mfma_set_timeout = _fn("mfma_set_timeout", None, client_p, c_int)
mfma_set_spin_us = _fn("mfma_set_spin_us", c_int, client_p, c_uint32)
mfma_spin_us = _fn("mfma_spin_us", c_uint32, client_p)
SPIN_US_MAX = 1000000  # MFMA_SPIN_US_MAX
mfma_endpoint = _fn("mfma_endpoint", c_char_p, client_p)
mfma_fileno = _fn("mfma_fileno", c_int, client_p)
mfma_gemm_args_init = _fn("mfma_gemm_args_init", None, POINTER(GemmArgs))
mfma_gemm = _fn("mfma_gemm", c_int, client_p, POINTER(GemmArgs), POINTER(GemmResult), err_p)
mfma_gemm_submit = _fn("mfma_gemm_submit", c_int, client_p, POINTER(GemmArgs),
                       POINTER(c_uint64), err_p)
mfma_wait = _fn("mfma_wait", c_int, client_p, c_uint64, c_int, POINTER(c_uint64),
                POINTER(GemmResult), err_p)
mfma_in_flight = _fn("mfma_in_flight", c_size_t, client_p)
mfma_cork = _fn("mfma_cork", None, client_p)
mfma_uncork = _fn("mfma_uncork", c_int, client_p, err_p)
mfma_gemm_result_free = _fn("mfma_gemm_result_free", None, POINTER(GemmResult))
mfma_ping = _fn("mfma_ping", c_int, client_p, c_void_p, c_size_t, POINTER(c_uint64), err_p)
mfma_load_args_init = _fn("mfma_load_args_init", None, POINTER(LoadArgs))
mfma_load_weight = _fn("mfma_load_weight", c_int, client_p, POINTER(LoadArgs),
                       POINTER(LoadResult), err_p)
mfma_load_result_free = _fn("mfma_load_result_free", None, POINTER(LoadResult))
mfma_load_result_stored = _fn("mfma_load_result_stored", c_int, POINTER(LoadResult))
mfma_unload_weight = _fn("mfma_unload_weight", c_int, client_p, c_char_p, err_p)
mfma_list_weights = _fn("mfma_list_weights", c_int, client_p, POINTER(WeightList), err_p)
mfma_weight_list_free = _fn("mfma_weight_list_free", None, POINTER(WeightList))
mfma_status = _fn("mfma_status", c_int, client_p, POINTER(Status), err_p)
mfma_status_free = _fn("mfma_status_free", None, POINTER(Status))
mfma_sparse24_prune = _fn("mfma_sparse24_prune", c_int, c_void_p, c_int, c_uint32, c_uint32,
                          c_void_p, c_void_p, err_p)
mfma_sparse24_compress = _fn("mfma_sparse24_compress", c_int, c_void_p, c_int, c_uint32,
                             c_uint32, c_void_p, c_void_p, err_p)
mfma_sparse24_decompress = _fn("mfma_sparse24_decompress", c_int, c_void_p, c_void_p, c_int,
                               c_uint32, c_uint32, c_void_p, err_p)
mfma_check_tolerance = _fn("mfma_check_tolerance", c_double, c_int, c_uint32)
region_p = c_void_p
mfma_region_create = _fn("mfma_region_create", c_int, client_p, c_size_t, POINTER(region_p),
                         err_p)
mfma_region_destroy = _fn("mfma_region_destroy", c_int, client_p, region_p, err_p)
mfma_region_data = _fn("mfma_region_data", c_void_p, region_p)
mfma_region_size = _fn("mfma_region_size", c_size_t, region_p)


def text(b):
    return b.decode("utf-8", "replace") if b else ""
