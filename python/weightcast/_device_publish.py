"""publish_async() of tensors in GPU memory (docs/gpu.md, "Publishing from GPU tensors").

The trainer waits only for a device-to-device copy of its tensors (the snapshot). A thread of
the publisher's own then copies each snapshot to host memory, once the device has finished it,
and hands it to the publisher's queue, so that the device-to-host copy of one version overlaps
the hashing and encoding of the one before. Every publish of a Publisher that has started one
goes through the same thread, so versions keep the order they were submitted in.
"""

import queue
import threading

import numpy as np

from . import _weightcast
from ._tensors import is_torch_tensor, torch


def on_device(tensors):
    """Whether any tensor of the dict lives outside host memory."""
    return any(is_torch_tensor(t) and t.device.type != "cpu" for t in tensors.values())


def _snapshot(tensors, copy):
    """With `copy`, the tensors as they are now: device tensors copied where they are (the
    trainer's only wait), host tensors in host memory. Without, the tensors themselves (the
    caller leaves them unchanged until the handle is done)."""
    out = {}
    for name, t in tensors.items():
        if is_torch_tensor(t):
            t = t.detach()
            out[name] = t.clone() if copy else t
        else:
            out[name] = np.array(t, copy=True) if copy else t
    return out


class _Pending:
    """A PublishHandle's core until the thread has submitted the version, then the publisher's
    own handle core."""

    def __init__(self):
        self._ready = threading.Event()
        self._core = None
        self._error = None

    def _resolve(self, core=None, error=None):
        self._core, self._error = core, error
        self._ready.set()

    def _inner(self, timeout):
        if not self._ready.wait(timeout):
            raise _weightcast.DeadlineExceededError(
                "publish not submitted within the timeout (its device-to-host copy is queued)")
        if self._error is not None:
            raise self._error
        return self._core

    def done(self):
        return self._ready.is_set() and (self._error is not None or self._core.done())

    def wait(self, timeout=None):
        return self._inner(timeout).wait(timeout)

    def wait_until(self, until, timeout):
        self._inner(timeout).wait_until(until, timeout)


class DeviceSnapshots:
    """The thread that brings snapshots of device tensors to the host, in submission order."""

    def __init__(self, core, publishable):
        self._core = core
        self._publishable = publishable
        self._jobs = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="weightcast-device-snapshots",
                                        daemon=True)
        self._thread.start()

    def submit(self, tensors, step, copy):
        snapshot = _snapshot(tensors, copy)
        done = None
        if any(is_torch_tensor(t) and t.device.type == "cuda" for t in snapshot.values()):
            done = torch.cuda.Event()
            done.record()  # the snapshot's copies, in the trainer's stream
        pending = _Pending()
        self._jobs.put((snapshot, step, done, pending))
        return pending

    def drain(self):
        """Waits until every submitted snapshot is in the publisher's queue."""
        self._jobs.join()

    def close(self):
        self._jobs.put(None)
        self._thread.join()

    def _run(self):
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                snapshot, step, done, pending = job
                try:
                    if done is not None:
                        done.synchronize()
                    host = {n: t.cpu() if is_torch_tensor(t) else t for n, t in snapshot.items()}
                    # copy=False: the host copy is this publish's own; the handle keeps it alive.
                    pending._resolve(core=self._core.publish_async(
                        self._publishable(host, step), step, False))
                except Exception as e:  # the caller sees it from the handle
                    pending._resolve(error=e)
            finally:
                self._jobs.task_done()
