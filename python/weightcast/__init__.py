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
from ._subscriber import Subscriber  # noqa: F401
from ._version import TensorInfo, Version  # noqa: F401


def weightcast_binary():
    """Path of the `weightcast` executable: $WEIGHTCAST_BIN, else the one this module was
    built with."""
    import os

    path = os.environ.get("WEIGHTCAST_BIN")
    if path:
        return path
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
