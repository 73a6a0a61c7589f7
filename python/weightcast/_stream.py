"""A version read while it arrives: (name, tensor) pairs as each tensor is verified."""

import mmap

import numpy as np

from . import _tensors
from ._weightcast import InvalidArgumentError


# madvise(MADV_POPULATE_READ) (Linux 5.14): maps a tensor's pages in one call, where reading
# them would take a page fault each (costly under a hypervisor). A tensor handed over is read
# whole by its loader, so this is work it would do anyway.
_MADV_POPULATE_READ = 22


def _prefault(mapping, offset, size):
    start = offset - offset % mmap.PAGESIZE
    try:
        mapping.madvise(_MADV_POPULATE_READ, start, offset + size - start)
    except (OSError, ValueError):
        pass  # an older kernel: the pages fault in as they are read


class VersionStream:
    """``for name, tensor in sub.stream(v)``: each tensor of version ``v`` as soon as every
    chunk it spans is verified against the signed manifest (docs/streaming.md), in the order the
    chunks complete, or ``order``'s names first. Each tensor is a view of the version's files
    without a copy, mapped copy-on-write as a :class:`Version`'s are: a torch tensor (numpy
    with ``numpy=True``; BF16 and float8 then come as their raw bits).

    The loop ends once every tensor was handed over; that is not yet a commit: call
    :meth:`wait_committed` before serving what was loaded. If the version is aborted first, the
    loop (or ``wait_committed``) raises AbortedError with the abort's reason: drop what was
    loaded. ``committed`` says whether the commit was seen."""

    def __init__(self, core, numpy=False):
        self._core = core
        self._numpy = numpy
        self._maps = {}
        self._files = core.files()
        if not numpy and _tensors.torch is None:
            raise InvalidArgumentError("torch is not installed: stream(..., numpy=True)")

    @property
    def version(self):
        return self._core.version

    @property
    def committed(self):
        return self._core.committed

    def __len__(self):
        """The tensors the stream hands over."""
        return self._core.tensor_count

    @property
    def handed_over(self):
        return self._core.handed_over

    def __iter__(self):
        return self

    def __next__(self):
        item = self._core.next()
        if item is None:
            raise StopIteration
        name, dtype, shape, file_index, offset, size = item
        return name, self._view(dtype, tuple(shape), file_index, offset, size)

    def wait_committed(self):
        """Blocks until the version is committed; AbortedError (with the reason) if it was
        aborted. Returns the version number."""
        self._core.wait_committed()
        return self.version

    def _mapping(self, file_index):
        mapping = self._maps.get(file_index)
        if mapping is None:
            size = self._files[file_index][1]
            mapping = mmap.mmap(self._core.fileno(file_index), size, access=mmap.ACCESS_COPY)
            self._maps[file_index] = mapping
        return mapping

    def _view(self, dtype, shape, file_index, offset, size):
        if dtype in _tensors.SUB_BYTE:
            np_dtype, np_shape = np.dtype(np.uint8), (size,)
        else:
            np_dtype, np_shape = _tensors.NUMPY_OF[dtype], shape
        if size == 0:
            array = np.empty(np_shape, dtype=np_dtype)
        else:
            mapping = self._mapping(file_index)
            _prefault(mapping, offset, size)
            array = np.frombuffer(mapping, dtype=np_dtype, count=size // np_dtype.itemsize,
                                  offset=offset).reshape(np_shape)
        if self._numpy:
            array.flags.writeable = False
            return array
        torch = _tensors.torch
        torch_dtype = _tensors.TORCH_OF.get(dtype)
        if torch_dtype is None:
            raise InvalidArgumentError(
                f"dtype {dtype} has no torch type here; stream(..., numpy=True)")
        if dtype in _tensors.RAW_IN_NUMPY:
            carrier = np.int16 if array.dtype.itemsize == 2 else np.uint8
            return torch.from_numpy(array.view(carrier)).view(torch_dtype)
        return torch.from_numpy(array)
