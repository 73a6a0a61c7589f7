"""weightcast: move model weights from a trainer to the machines that sample or serve from them.

    pub = weightcast.Publisher("/tmp/pub", "policy", coordinator, secret_file)
    pub.publish(model.state_dict(), step)            # tensors in memory -> a version
    h = pub.publish_async(model.state_dict(), step)  # returns once the bytes are copied

    sub = weightcast.Subscriber("/tmp/agent", "policy", coordinator, secret_file)
    v = sub.wait()                                   # zero-copy views of the committed files
    model.load_state_dict(v.state_dict())
    v2 = sub.wait(v.version + 1)
    for name, ranges in sub.changed(v): ...          # what differs, to update only that

See docs/python.md.
"""



def _extension_mismatch(error):
    """The ImportError for an extension this interpreter cannot load, naming the one it is for."""
    import sys
    import sysconfig

    try:
        from ._build_info import EXT_SUFFIX, PYTHON, PYTHON_VERSION
    except ImportError:
        return error
    here = "%d.%d" % sys.version_info[:2]
    if EXT_SUFFIX == sysconfig.get_config_var("EXT_SUFFIX"):
        return error
    return ImportError(
        f"weightcast was built for Python {PYTHON_VERSION} ({PYTHON}), whose extensions end in "
        f"{EXT_SUFFIX}; this is Python {here} ({sys.executable}). Install it for this "
        "interpreter: python -m pip install --no-build-isolation . (docs/python.md)")


try:
    from . import _weightcast  # noqa: F401
except ImportError as _error:
    raise _extension_mismatch(_error) from None

from ._weightcast import (  # noqa: F401
    AbortedError,
    AlreadyExistsError,
    CorruptError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    OutOfRangeError,
    ResourceExhaustedError,
    UnauthenticatedError,
    UnavailableError,
)
from ._live import LiveTensors  # noqa: F401
from ._publisher import PublishHandle, Publisher, PublishResult  # noqa: F401
from ._stream import VersionStream  # noqa: F401
from ._subscriber import Subscriber  # noqa: F401
from ._version import TensorInfo, Version  # noqa: F401


def weightcast_binary():
    """Path of the `weightcast` executable: $WEIGHTCAST_BIN, else the installed package's own
    (bin/weightcast beside this file), else the one a build tree's module was built with, else
    the first on PATH."""
    import os

    path = os.environ.get("WEIGHTCAST_BIN")
    if path:
        return path
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "weightcast")
    if os.access(bundled, os.X_OK):
        return bundled
    try:
        from ._build_info import WEIGHTCAST_BIN
    except ImportError:
        WEIGHTCAST_BIN = None
    if WEIGHTCAST_BIN and os.path.exists(WEIGHTCAST_BIN):
        return WEIGHTCAST_BIN
    import shutil

    found = shutil.which("weightcast")
    if found is None:
        raise NotFoundError("no weightcast binary: set WEIGHTCAST_BIN or build it")
    return found
