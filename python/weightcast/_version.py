"""A committed version seen as a mapping of tensor name -> zero-copy view of its files."""

import collections.abc
import mmap

import numpy as np

from . import _tensors
from ._weightcast import FailedPreconditionError, InvalidArgumentError


class TensorInfo(collections.namedtuple(
        "TensorInfo", "name dtype shape file offset size")):
    """Where a tensor lives: its safetensors dtype ("BF16"), shape, file (relative path),
    byte offset in that file and byte size."""


class Version(collections.abc.Mapping):
    """One committed version of a channel.

    ``version[name]`` is always a read-only numpy array of the tensor's values, a view of its
    bytes in the version's files without a copy. For the dtypes whose values numpy cannot hold
    (BF16, the float8 types, F6/F4) it raises TypeError instead of handing out raw bits that
    look like numbers: ask ``torch(name)`` (or ``state_dict()``) for the values, ``numpy(name)``
    for the raw bits.

    The files are memory-mapped copy-on-write (MAP_PRIVATE): views read the page cache, and a
    write through a torch view changes only this process's private copy, never the file. The
    mappings live as long as any view of them does, even after the store has collected the
    version, so a view never dangles.
    """

    def __init__(self, opened):
        self.channel = opened.channel
        self.version = opened.version
        self.path = opened.path
        self.root = opened.root
        self.chunk_size = opened.chunk_size
        self.total_size = opened.total_size
        self.chunk_count = opened.chunk_count
        self.metadata = dict(opened.metadata)
        self.base_version = opened.base_version
        # A tensor-subset agent's version (Subscriber(..., tensors=[...])): the C++ side lists
        # only the tensors it received; the others' bytes are zeros and are never shown.
        partial = opened.partial()
        self.tensor_patterns = list(partial[0]) if partial is not None else None
        self._unselected = set(partial[1]) if partial is not None else set()
        files = opened.files()
        self.files = [path for path, _ in files]
        self._maps = []
        try:
            for index, (_, size) in enumerate(files):
                if size == 0:
                    self._maps.append(None)  # mmap refuses empty files; no tensor bytes there
                else:
                    self._maps.append(
                        mmap.mmap(opened.fileno(index), size, access=mmap.ACCESS_COPY))
        finally:
            opened.close_files()  # each mmap holds its own duplicate of the descriptor
        self._tensors = {}
        for name, dtype, shape, file_index, offset, size in opened.tensors():
            self._tensors[name] = TensorInfo(name, dtype, tuple(shape), self.files[file_index],
                                             offset, size)
        self._file_index = {path: i for i, path in enumerate(self.files)}
        # Every whole tensor's slices, then those offered: the ones whose every slice is held.
        self._whole_slices = _read_slices(self.metadata, None)
        self._wholes = {w: s for w, s in _read_slices(self.metadata, self._tensors).items()
                        if len(s[1]) == len(self._whole_slices[w][1])}
        # The names a sampler sees: whole tensors in place of their slices.
        hidden = {s for slices in self._wholes.values() for s in slices[1]}
        self._names = [n for n in self._tensors if n not in hidden] + list(self._wholes)

    @property
    def step(self):
        """The trainer step the publisher gave, or None."""
        value = self.metadata.get("step")
        return int(value) if value is not None else None

    @property
    def partial(self):
        """True for a tensor-subset agent's version: only the tensors of ``tensor_patterns``
        are in it."""
        return self.tensor_patterns is not None

    def _check_selected(self, name):
        whole = self._whole_slices.get(name, ())
        if name in self._unselected or (whole and name not in self._wholes):
            raise FailedPreconditionError(
                f"tensor {name!r} of version {self.version} was not received: this version "
                f"holds only the tensors of {self.tensor_patterns} (a tensor-subset agent's)")

    def info(self, name):
        """TensorInfo of a tensor (KeyError if it is not in this version). A whole tensor made
        of a sharded publish's slices has file None and offset None."""
        self._check_selected(name)
        if name in self._wholes:
            return self._whole_info(name)
        return self._tensors[name]

    def _whole_info(self, name):
        dim, names, _ = self._wholes[name]
        first = self._tensors[names[0]]
        shape = list(first.shape)
        shape[dim] = sum(self._tensors[n].shape[dim] for n in names)
        return TensorInfo(name, first.dtype, tuple(shape), None, None,
                          sum(self._tensors[n].size for n in names))

    def slices(self, name):
        """The tensors a whole tensor of a sharded publish is made of, in order: a list of
        (slice name, dim, start); empty for any other tensor."""
        if name not in self._wholes:
            return []
        dim, names, starts = self._wholes[name]
        return [(n, dim, start) for n, start in zip(names, starts)]

    def __getitem__(self, name):
        self._check_selected(name)
        if name in self._wholes:
            info = self._whole_info(name)
            if info.dtype in _tensors.RAW_IN_NUMPY:
                raise TypeError(
                    f"tensor {name!r} is {info.dtype}, which numpy has no type for: use "
                    f"v.torch({name!r}) or v.state_dict() for its values")
            return self.numpy(name)
        info = self._tensors[name]
        if info.dtype in _tensors.RAW_IN_NUMPY:
            raise TypeError(
                f"tensor {name!r} is {info.dtype}, which numpy has no type for: use "
                f"v.torch({name!r}) or v.state_dict() for its values, v.numpy({name!r}) for its "
                "raw bits")
        return self.numpy(name)

    def __iter__(self):
        return iter(self._names)

    def __len__(self):
        return len(self._names)

    def __contains__(self, name):
        return name in self._tensors or name in self._wholes

    def __repr__(self):
        return (f"<weightcast.Version {self.channel} v{self.version}: {len(self)} tensors, "
                f"{self.total_size} bytes>")

    def _raw(self, info, writeable):
        """A uint8/typed numpy view of the tensor's bytes, or an empty array."""
        mapping = self._maps[self._file_index[info.file]]
        if info.dtype in _tensors.SUB_BYTE:
            dtype, shape = np.dtype(np.uint8), (info.size,)
        else:
            dtype, shape = _tensors.NUMPY_OF[info.dtype], info.shape
        if info.size == 0 or mapping is None:
            array = np.empty(shape, dtype=dtype)
        else:
            array = np.frombuffer(mapping, dtype=dtype, count=info.size // dtype.itemsize,
                                  offset=info.offset).reshape(shape)
        if not writeable:
            array.flags.writeable = False
        return array

    def numpy(self, name):
        """Read-only numpy view of a tensor. BF16 and float8 come as their raw bits (uint16,
        uint8); F6/F4 as flat uint8 bytes. A whole tensor of a sharded publish is its slices
        concatenated (a copy)."""
        self._check_selected(name)
        if name in self._wholes:
            dim, names, _ = self._wholes[name]
            whole = np.concatenate([self._raw(self._tensors[n], writeable=False) for n in names],
                                   axis=dim)
            whole.flags.writeable = False
            return whole
        return self._raw(self._tensors[name], writeable=False)

    def torch(self, name):
        """torch view of a tensor (copy-on-write: writes stay in this process)."""
        torch = _tensors.torch
        if torch is None:
            raise InvalidArgumentError("torch is not installed")
        self._check_selected(name)
        if name in self._wholes:
            dim, names, _ = self._wholes[name]
            return torch.cat([self.torch(n) for n in names], dim=dim)
        info = self._tensors[name]
        torch_dtype = _tensors.TORCH_OF.get(info.dtype)
        if torch_dtype is None:
            raise InvalidArgumentError(
                f"tensor {name}: dtype {info.dtype} has no torch type here; use numpy({name!r})")
        array = self._raw(info, writeable=True)
        if info.dtype in _tensors.RAW_IN_NUMPY:
            # Raw bits of the same width, reinterpreted without a copy (uint16 -> int16 because
            # torch 1.13 has no uint16; the bits are what matter).
            carrier = np.int16 if array.dtype.itemsize == 2 else np.uint8
            return torch.from_numpy(array.view(carrier)).view(torch_dtype)
        return torch.from_numpy(array)

    def state_dict(self):
        """{name: torch view} of every tensor, for ``model.load_state_dict``."""
        return {name: self.torch(name) for name in self._names}

    def bytes_of(self, name):
        """The tensor's bytes as a read-only memoryview (no copy)."""
        self._check_selected(name)
        info = self._tensors[name]
        if info.size == 0:
            return memoryview(b"")
        mapping = self._maps[self._file_index[info.file]]
        return memoryview(mapping)[info.offset:info.offset + info.size].toreadonly()


def _read_slices(metadata, tensors):
    """{whole name: (dim, [slice names], [starts])} from a sharded version's slice table
    (metadata "weightcast.slices", ".1", ...: whole, dim, slice, start, length, extent per line;
    docs/sharded_publish.md). With ``tensors``, only the slices among them."""
    text = metadata.get("weightcast.slices", "")
    i = 1
    while f"weightcast.slices.{i}" in metadata:
        text += metadata[f"weightcast.slices.{i}"]
        i += 1
    wholes = {}
    for line in text.splitlines():
        if not line:
            continue
        whole, dim, name, start, _length, _extent = line.split("\t")
        if tensors is not None and name not in tensors:
            continue
        entry = wholes.setdefault(whole, (int(dim), [], []))
        entry[1].append(name)
        entry[2].append(int(start))
    for whole, (dim, names, starts) in wholes.items():
        order = sorted(range(len(names)), key=lambda k: starts[k])
        wholes[whole] = (dim, [names[k] for k in order], [starts[k] for k in order])
    return wholes
