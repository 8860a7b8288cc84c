"""Exceptions: every failure of a call is an mfma.Error carrying the code and
the message libmfmaclient reported.

    code > 0   the daemon answered with an error: the wire code (1
               INVALID_ARGUMENT ... 9 FAILED_PRECONDITION), code_name its name, message
               the daemon's own sentence; raised as the subclass named after
               the code (mfma.NotFound, mfma.InvalidArgument, ...).
    code < 0   a local or transport failure: a negative errno value
               (-errno.ECONNREFUSED, -errno.ETIMEDOUT ...); raised as
               mfma.TransportError, except -errno.EINVAL: an argument the
               library refused before sending anything (an empty weight
               name, an endpoint it cannot parse), raised as
               mfma.ArgumentError, which is a ValueError too."""

import errno as _errno

from . import _lib


class Error(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def code_name(self):
        if self.code > 0:
            return _lib.text(_lib.mfma_code_name(self.code))
        return _errno.errorcode.get(-self.code, str(self.code))

    def __str__(self):
        return f"{self.code_name}: {self.message}"


class DaemonError(Error):
    """The daemon refused or failed the request."""


class TransportError(Error):
    """Connecting, sending or receiving failed (code is -errno)."""


class ArgumentError(Error, ValueError):
    """An argument refused before anything was sent (code is -EINVAL)."""


class InvalidArgument(DaemonError):
    pass


class NotFound(DaemonError):
    pass


class AlreadyExists(DaemonError):
    pass


class ResourceExhausted(DaemonError):
    pass


class Unavailable(DaemonError):
    pass


class DeadlineExceeded(DaemonError):
    pass


class Internal(DaemonError):
    pass


class Malformed(DaemonError):
    pass


class FailedPrecondition(DaemonError):
    """Not possible on this connection: a shared-memory region over TCP."""


_BY_CODE = {1: InvalidArgument, 2: NotFound, 3: AlreadyExists, 4: ResourceExhausted,
            5: Unavailable, 6: DeadlineExceeded, 7: Internal, 8: Malformed,
            9: FailedPrecondition}


def from_c(rc, err):
    """The exception for a failed call: rc its return value, err its
    struct mfma_error."""
    msg = _lib.text(err.message)
    if rc <= -_lib.EREMOTE_BASE:
        code = -rc - _lib.EREMOTE_BASE
        return _BY_CODE.get(code, DaemonError)(code, msg)
    code = err.code if err.code < 0 else rc
    if code == -_errno.EINVAL:
        return ArgumentError(code, msg)
    return TransportError(code, msg)
