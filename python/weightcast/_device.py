"""Live tensors in device memory: what an apply does to them, as torch operations (docs/gpu.md).

The C++ apply decodes every payload on the host into changes (positions and values) and calls
these methods with device addresses, so the device only gathers, combines and scatters. The same
code runs on any torch device; on CPU tensors it is what the tests prove, on a GPU it is the
path whose speed scripts/device-check.sh measures. Host bytes arrive as memoryviews valid only
during the call: on a CUDA device they are copied into pinned memory first and uploaded without
blocking (torch's pinned allocator keeps a buffer until its copy is done), in stream order with
the operations that use them.
"""

import bisect

import numpy as np

from . import _weightcast
from ._tensors import torch

# weighted_sums reads a range in slices of _SUM_SLICE bytes, each as rows of _ROW bytes. Every sum
# of a slice stays exact in int64: B of a slice is at most 255 * (64 Mi)^2 / 2 < 2^60.
_SUM_SLICE = 64 << 20
_ROW = 4096
_MASK = (1 << 64) - 1


def flat_bytes(t):
    """The bytes of a contiguous tensor as a flat uint8 tensor sharing its memory."""
    return t.reshape(-1).view(torch.uint8)


class TorchDevice:
    """The DeviceMemory of live tensors on one torch device (weightcast/live.h)."""

    def __init__(self, device):
        self.device = torch.device(device)
        self._starts = []  # data_ptr of every registered tensor, sorted
        self._spans = []   # (start, nbytes, flat uint8 view), in the same order
        self._weights = None

    def register(self, tensors):
        """Makes the tensors' memory reachable by address (both copies of a flip share one)."""
        for t in tensors:
            n = t.numel() * t.element_size()
            if n == 0:
                continue
            start = t.data_ptr()
            at = bisect.bisect(self._starts, start)
            self._starts.insert(at, start)
            self._spans.insert(at, (start, n, flat_bytes(t)))

    # --- the calls of DeviceMemory ---------------------------------------------------------

    def write(self, address, host):
        self._at(address, len(host)).copy_(self._staged(host), non_blocking=True)

    def read(self, address, host):
        out = torch.from_numpy(np.frombuffer(host, dtype=np.uint8))
        out.copy_(self._at(address, len(out)))

    def copy(self, to, source, size):
        self._at(to, size).copy_(self._at(source, size))

    def change(self, address, width, add, offsets, values):
        positions = np.frombuffer(offsets, dtype=np.uint64)
        if len(positions) == 0:
            return
        span = self._at(address, int(positions[-1]) + width)  # offsets are increasing
        index = self._staged(offsets).view(torch.int64).to(self.device, non_blocking=True)
        cols = index[:, None] + torch.arange(width, device=self.device)
        given = self._staged(values).to(self.device, non_blocking=True).view(-1, width)
        now = span[cols]
        if not add:
            span[cols] = now ^ given
            return
        # Little-endian addition a byte at a time with its carry, in int32: exact on any device,
        # with no reliance on how a backend wraps signed overflow.
        out = torch.empty_like(now)
        carry = torch.zeros(len(positions), dtype=torch.int32, device=self.device)
        for k in range(width):
            total = now[:, k].to(torch.int32) + given[:, k].to(torch.int32) + carry
            out[:, k] = (total & 0xFF).to(torch.uint8)
            carry = total >> 8
        span[cols] = out

    def xor_bytes(self, address, host):
        span = self._at(address, len(host))
        span.bitwise_xor_(self._staged(host).to(self.device, non_blocking=True))

    def weighted_sums(self, address, size):
        # Each slice is read as a matrix x of R rows by _ROW bytes, summed along both axes with
        # int64 accumulators (no int64 copy of the bytes is made):
        #   A = sum(x),  B = sum over (r * _ROW + c + 1) * x[r, c]
        #     = _ROW * sum_r r * rows[r] + sum_c c * cols[c] + A,
        # and the bytes past the last whole row (fewer than _ROW) with their weights.
        # Two reads of the bytes, about what a device-to-device copy of them costs.
        span = self._at(address, size)
        parts = []
        for start in range(0, size, _SUM_SLICE):
            piece = span[start:start + _SUM_SLICE]
            whole = len(piece) - len(piece) % _ROW
            rows = piece[:whole].view(-1, _ROW)
            row_sums = rows.sum(dim=1, dtype=torch.int64)
            col_sums = rows.sum(dim=0, dtype=torch.int64)
            tail = piece[whole:].to(torch.int64)  # fewer than _ROW bytes
            a = row_sums.sum() + tail.sum()
            b = (_ROW * (row_sums * self._ramp(len(row_sums), 0)).sum()
                 + (col_sums * self._ramp(_ROW, 0)).sum() + row_sums.sum()
                 + (tail * (self._ramp(len(tail), 1) + whole)).sum())
            parts.append(torch.stack((a, b)))
        a = b = 0
        # One transfer to the host for the whole range; the sums combine exactly in Python ints.
        for i, (pa, pb) in enumerate(torch.stack(parts).tolist()):
            a += pa
            b += pb + i * _SUM_SLICE * pa
        return a & _MASK, b & _MASK

    # --- helpers -----------------------------------------------------------------------------

    def _at(self, address, size):
        at = bisect.bisect_right(self._starts, address) - 1
        if at >= 0:
            start, n, flat = self._spans[at]
            if address - start + size <= n:
                return flat[address - start:address - start + size]
        raise _weightcast.InternalError(
            f"device range {address:#x} + {size} lies in no registered live tensor")

    def _staged(self, host):
        """Host bytes as a uint8 tensor the device can read after this call returns."""
        array = torch.from_numpy(np.frombuffer(host, dtype=np.uint8))
        if self.device.type != "cuda":
            # The CPU reads it before the call returns; another device copies it synchronously.
            return array if self.device.type == "cpu" else array.clone()
        pinned = torch.empty(len(array), dtype=torch.uint8, pin_memory=True)
        pinned.copy_(array)
        return pinned

    def _ramp(self, n, first):
        """first, first + 1, ..., first + n - 1 as int64 on the device (a view of a cached ramp)."""
        if self._weights is None or len(self._weights) < first + n:
            self._weights = torch.arange(0, max(first + n, _SUM_SLICE // _ROW, _ROW + 1),
                                         dtype=torch.int64, device=self.device)
        return self._weights[first:first + n]
