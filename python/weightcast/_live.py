"""Live tensors: the weights a sampler serves from, updated in place or flipped (docs/live.md)."""

import time

import numpy as np

from . import _weightcast
from ._tensors import _NAME_OF_NUMPY, _NAME_OF_TORCH, is_torch_tensor, torch


def _view(name, t, device=None):
    """(name, dtype, shape, address, nbytes) of writable, C-contiguous memory: host memory, or
    with `device` (torch ops), memory on that torch device."""
    if is_torch_tensor(t):
        where = torch.device("cpu") if device is None else device
        if t.device != where or not t.is_contiguous():
            raise _weightcast.InvalidArgumentError(
                f"live tensor {name}: must be a contiguous tensor on {where} (is {t.device}, "
                f"contiguous={t.is_contiguous()})")
        dtype = _NAME_OF_TORCH.get(t.dtype)
        if dtype is None:
            raise _weightcast.InvalidArgumentError(
                f"live tensor {name}: torch dtype {t.dtype} has no safetensors type")
        return (name, dtype, list(t.shape), t.data_ptr(), t.numel() * t.element_size())
    if device is not None:
        raise _weightcast.InvalidArgumentError(
            f"live tensor {name}: torch operations need torch tensors, not {type(t).__name__}")
    if isinstance(t, np.ndarray):
        if not t.flags.c_contiguous or not t.flags.writeable:
            raise _weightcast.InvalidArgumentError(
                f"live tensor {name}: must be a writable C-contiguous array")
        if t.dtype.byteorder == ">":
            raise _weightcast.InvalidArgumentError(f"live tensor {name}: big-endian array")
        dtype = _NAME_OF_NUMPY.get(t.dtype.newbyteorder("="))
        if dtype is None:
            raise _weightcast.InvalidArgumentError(
                f"live tensor {name}: numpy dtype {t.dtype} has no safetensors type "
                "(bf16 as a torch.bfloat16 tensor)")
        return (name, dtype, list(t.shape), t.ctypes.data, t.nbytes)
    raise _weightcast.InvalidArgumentError(
        f"live tensor {name}: expected a torch tensor or a numpy array, not {type(t).__name__}")


def _device_of(tensors, torch_ops):
    """The TorchDevice that applies to `tensors`, or None to apply in host memory."""
    if torch_ops not in (None, True, False):
        raise TypeError(f"torch_ops must be None or a bool, not {torch_ops!r}")
    devices = {t.device for t in tensors.values() if is_torch_tensor(t)}
    on_host = devices <= {torch.device("cpu")} if torch is not None else True
    if torch_ops is False or (torch_ops is None and on_host):
        return None
    if len(devices) != 1 or not all(is_torch_tensor(t) for t in tensors.values()):
        raise _weightcast.InvalidArgumentError(
            "live tensors applied with torch operations must all be torch tensors on one device "
            f"(found {sorted(str(d) for d in devices) or 'no torch tensor'})")
    from ._device import TorchDevice
    return TorchDevice(next(iter(devices)))


def _copy(t):
    return t.clone() if is_torch_tensor(t) else np.array(t, copy=True)


class LiveTensors:
    """The tensors a sampler serves from, brought to each new version by ``Subscriber.update``.

    ``LiveTensors(model)`` (an ``nn.Module``: its ``state_dict()``, which shares the parameters'
    memory) or ``LiveTensors({name: tensor})`` (torch CPU tensors or numpy arrays, any dtype the
    format has, bf16 and fp8 included). Only the changed elements are written.

    ``flip=False`` (in place): ``update`` writes into these tensors; the caller must not sample
    during it, and the report's ``blocked_seconds`` is the whole apply.

    ``flip=True``: a second copy is kept (made here, or ``second=`` a dict of the same tensors
    the caller allocated); ``update`` writes the new version into the copy not in
    use, then flips: ``.tensors`` is the new dict and, for a module, its parameters and buffers
    are re-pointed at it (``param.data = ...``), which is all the sampler waits for
    (``blocked_seconds``). At the next update the idle copy first catches up with the one in
    use (one memcpy), then takes one delta.

    Tensors on a GPU (any torch device; docs/gpu.md): every tensor on the same device. Each
    payload is decoded on the host into the changed positions and values, uploaded, and
    scattered on the device with torch operations; each chunk written is checked there against
    the version's device checks (publish with ``device_checks=True``; a version without them is
    read back and hashed on the host). The flip's two copies are both on the device.
    ``torch_ops=True`` takes this path for CPU tensors too (what the tests run); the default,
    None, takes it exactly when the tensors are not on the CPU.
    """

    def __init__(self, tensors, flip=False, second=None, torch_ops=None):
        self._module = None
        if torch is not None and isinstance(tensors, torch.nn.Module):
            self._module = tensors
            tensors = tensors.state_dict(keep_vars=False)
        if not isinstance(tensors, dict) or not tensors:
            raise _weightcast.InvalidArgumentError(
                "LiveTensors takes an nn.Module or a non-empty dict of name -> tensor")
        self.flip = bool(flip)
        front = dict(tensors)
        self._device = _device_of(front, torch_ops)
        self._sets = [(front, self._register(front))]
        if second is not None and not self.flip:
            raise _weightcast.InvalidArgumentError("second= is the flip's other copy: pass flip=True")
        if self.flip:
            if second is None:
                back = {n: _copy(t) for n, t in front.items()}
            else:
                back = dict(second)
                if set(back) != set(front):
                    raise _weightcast.InvalidArgumentError(
                        "second= must hold the same tensor names as the first copy")
            self._sets.append((back, self._register(back)))
        self._front = 0

    def _register(self, tensors):
        if self._device is None:
            return _weightcast._LiveTensors([_view(n, t) for n, t in tensors.items()])
        views = [_view(n, t, self._device.device) for n, t in tensors.items()]
        self._device.register(tensors.values())
        return _weightcast._LiveTensors(views, self._device)

    @property
    def tensors(self):
        """The dict of tensors to serve from now (after a flip, the other copy)."""
        return self._sets[self._front][0]

    @property
    def version(self):
        """The version ``tensors`` hold (0: none yet)."""
        return self._sets[self._front][1].version

    def _apply(self, store, channel, version, memory=False):
        if not self.flip:
            start = time.perf_counter()
            report = self._sets[0][1].apply_from_store(str(store), channel, version, memory)
            report["blocked_seconds"] = time.perf_counter() - start
            return report
        back = 1 - self._front
        front_set, back_set = self._sets[self._front][1], self._sets[back][1]
        # A memory channel's versions are copied, not patched: the apply copies the chunks that
        # differ from what the idle copy holds, so a catch-up copy first would only copy twice.
        if not memory and front_set.version != 0 and back_set.version != front_set.version and \
                front_set.version < version:
            if self._device is None:
                # The idle copy catches up with the copy in use as it is patched: each chunk
                # copied from the copy in use, then the delta onto it, in one pass (not a chain
                # of two deltas, nor a memcpy of the model first). Without a delta onto the copy
                # in use's version it applies from what the idle copy holds.
                report = back_set.apply_from_store(str(store), channel, version, memory,
                                                   catch_up_from=front_set)
            else:
                # On a device one copy of the model costs less than a copy per chunk (each a
                # launch); then one delta (not a chain of two) brings it to `version`.
                back_set.copy_from(front_set)
                report = back_set.apply_from_store(str(store), channel, version, memory)
        else:
            report = back_set.apply_from_store(str(store), channel, version, memory)
        start = time.perf_counter()
        self._front = back
        if self._module is not None:
            self._repoint(self._sets[back][0])
        report["blocked_seconds"] = time.perf_counter() - start
        return report

    def _attest(self, store, channel):
        return self._sets[self._front][1].attest(str(store), channel)

    def _repoint(self, tensors):
        for name, t in tensors.items():
            owner, _, leaf = name.rpartition(".")
            module = self._module.get_submodule(owner) if owner else self._module
            if leaf in module._parameters and module._parameters[leaf] is not None:
                module._parameters[leaf].data = t
            elif leaf in module._buffers and module._buffers[leaf] is not None:
                module._buffers[leaf] = t


class _MemoryHandleCore:
    """PublishHandle's core for a memory channel's publish_async."""

    def __init__(self, pending, start):
        self._pending = pending
        self._start = start

    def done(self):
        return self._pending.done()

    def wait(self, timeout=None):
        out = dict(self._pending.wait(timeout))
        out["seconds"] = time.perf_counter() - self._start
        return out

    def wait_until(self, until, timeout):
        raise _weightcast.FailedPreconditionError("a memory channel seeds nothing")


class _MemoryCore:
    """Publisher's core for ``memory=True``: versions in shared memory for samplers on this
    machine (two slots reused in turn; docs/live.md, "Memory channel")."""

    def __init__(self, store, channel, chunk_size):
        self._p = _weightcast._MemoryPublisher(str(store), channel, chunk_size)

    def publish(self, items, step):
        return self._p.publish(items, step)

    def reserve(self, items):
        self._p.reserve(items)

    def publish_async(self, items, step, copy):
        # The snapshot is always a copy, into the slot the samplers read: copy=False saves
        # nothing here and the caller may change its tensors once this returns.
        start = time.perf_counter()
        return _MemoryHandleCore(self._p.publish_async(items, step), start)

    def status(self):
        return None

    def close(self, abort_pending=False):
        self._p.close()


class MemoryVersion:
    """What ``Subscriber(..., memory=True).wait()`` returns: the version number. A memory
    channel's bytes are reached through ``Subscriber.update(LiveTensors)``, which checks them;
    there are no views of them (a slot is rewritten two versions later)."""

    def __init__(self, version):
        self.version = version

    def __repr__(self):
        return f"<weightcast.MemoryVersion {self.version}>"
