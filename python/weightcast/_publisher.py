"""Publisher: turn tensors in memory into a version of a channel, without a checkpoint."""

import atexit
import collections
import collections.abc
import time
import weakref

from . import _options, _tensors, _weightcast
from ._device_publish import DeviceSnapshots, on_device


class PublishResult(collections.namedtuple(
        "PublishResult", "version step total_bytes chunk_count root wire_bytes seconds")):
    """What one publish() did. ``wire_bytes``: what a node holding the previous version must
    receive (delta payloads; the whole version for a full one); None for a local publisher,
    which sends nothing. ``seconds``: wall time of publish()."""

    @property
    def compression_ratio(self):
        """total_bytes / wire_bytes (None without wire bytes)."""
        if not self.wire_bytes:
            return None
        return self.total_bytes / self.wire_bytes


def _check_arguments(tensors, step):
    if not isinstance(tensors, collections.abc.Mapping) or not tensors:
        raise _weightcast.InvalidArgumentError(
            "tensors must be a non-empty dict of name -> tensor")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise _weightcast.InvalidArgumentError(f"step must be an int, not {step!r}")


def _publishable(tensors, step, slices=None):
    _check_arguments(tensors, step)
    items = [_tensors.to_publishable(name, value) for name, value in tensors.items()]
    if slices:
        if not isinstance(slices, collections.abc.Mapping):
            raise _weightcast.InvalidArgumentError(
                "slices must be a dict of name -> (dim, start, extent)")
        unknown = set(slices) - set(tensors)
        if unknown:
            raise _weightcast.InvalidArgumentError(
                f"slices names tensors that are not given: {sorted(unknown)}")
        out = []
        for item in items:
            spec = slices.get(item[0])
            if spec is not None:
                if (not isinstance(spec, tuple) or len(spec) != 3 or
                        not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                                for x in spec)):
                    raise _weightcast.InvalidArgumentError(
                        f"slices[{item[0]!r}] must be (dim, start, extent), not {spec!r}")
                item = tuple(item) + (spec,)
            out.append(item)
        items = out
    return items


def _result(out, step, seconds):
    return PublishResult(version=out["version"], step=step, total_bytes=out["total_bytes"],
                         chunk_count=out["chunk_count"], root=out["root"],
                         wire_bytes=out.get("wire_bytes"), seconds=seconds)


class PublishHandle:
    """One publish_async(): ``done()``, ``wait(timeout)`` -> PublishResult (``seconds``: from
    the publish_async() call until it completed) or the publish's error, and ``wait_until(until,
    timeout)`` as Publisher.wait_until for this publish's version."""

    def __init__(self, core, step):
        self._core = core
        self.step = step

    def done(self):
        """Whether the publish completed (succeeded or failed). Never blocks."""
        return self._core.done()

    def wait(self, timeout=None):
        """Blocks (GIL released) until the publish completed and returns its PublishResult, or
        raises its error. DeadlineExceededError after ``timeout`` seconds (the publish goes
        on)."""
        out = self._core.wait(_options.seconds("timeout", timeout))
        return _result(out, self.step, seconds=out["seconds"])

    def wait_until(self, until="replicated", timeout=None):
        """wait(), then as Publisher.wait_until. FailedPreconditionError for a local publisher."""
        self._core.wait_until(until, _options.seconds("timeout", timeout))

    def __repr__(self):
        state = "done" if self.done() else "pending"
        return f"<weightcast.PublishHandle step={self.step} {state}>"


# Every open Publisher, closed at interpreter exit (waiting for its queued publishes) while the
# interpreter still runs, so that no publish is cut off and the publisher's thread never needs
# the GIL of an interpreter that is finalizing.
_open_publishers = weakref.WeakSet()


@atexit.register
def _close_open_publishers():
    for publisher in list(_open_publishers):
        try:
            publisher.close()
        except Exception:  # noqa: BLE001 - exiting anyway; one failure must not skip the rest
            pass


class Publisher:
    """Publishes dicts of tensors as versions of a channel.

    The arguments come in the order :class:`Subscriber` takes them, store first:

    * ``Publisher(store, channel, coordinator=ADDR, secret_file=F)``: registers each version with
      the coordinator (delta against the previous one) and seeds it to the agents from ``store``.
    * ``Publisher(store, channel)``: commits each version into a local store only, for
      subscribers on the same machine (``Subscriber(store, channel)``).

    ``publish(tensors, step)`` writes the tensors straight into a safetensors file inside the
    store (no checkpoint of the trainer's own), builds the manifest and commits it; the GIL is
    released while it works. ``publish_async(tensors, step)`` returns once the bytes are
    snapshotted and does the rest on the publisher's thread.

    Errors come within seconds: a wrong secret raises UnauthenticatedError, a coordinator that
    cannot be reached within ``connect_timeout`` (default 5 s) UnavailableError, and a store path
    that is not a store (a file, a directory with files but without a store's ``.lock``)
    FailedPreconditionError.

    One writer per channel (with a coordinator): while another live publisher holds the channel,
    the constructor raises FailedPreconditionError ("channel C already has a writer: writer W
    (node N at ADDR, ...) ..."). ``take_over=True`` takes the channel from it; the publisher taken
    over then raises FailedPreconditionError ("fenced by writer ...") from its next publish. The
    writer's identity is ``writer_id``, by default an id kept in the store (``STORE/.writer-id``):
    a Publisher made again on the same store is the same writer and continues the delta chain.
    """

    _OPTIONS = {
        "listen": _options.text,
        "transport": _options.text,
        "cluster": _options.text,
        "node_id": _options.integer,
        "writer_id": _options.text,
        "take_over": _options.boolean,
        "rank": _options.integer,
        "world": _options.integer,
        "connect_timeout": _options.seconds,
        "log_level": _options.text,
        "log_file": _options.path,
        "ca": _options.path,
        "certificate": _options.path,
        "key": _options.path,
    }

    def __init__(self, store, channel, coordinator=None, secret_file=None, *, chunk_size=None,
                 keep_versions=2, memory=False, device_checks=False, **publisher_options):
        """``chunk_size``: "auto" (the default, also None or 0: by the version's size, as
        ``weightcast publish`` cuts it, docs/publish.md "Chunk size"), bytes (int) or a size
        string as the CLI takes ("1MiB"). ``device_checks=True`` signs a device check per
        chunk into every version (one more pass over it), so that samplers whose LiveTensors sit
        on a GPU check what they write there on the device (docs/gpu.md).
        ``publisher_options`` (with a coordinator): listen ("127.0.0.1:0"), transport ("tcp",
        "auto" or "ucx"), cluster, node_id, writer_id, take_over (bool), rank and world (sharded, see publish()), connect_timeout (s, default
        5), log_level ("warn"; also debug, info, error), log_file (default stderr); ca,
        certificate and key: certificate mode (docs/security.md), the cluster CA's certificate
        and this node's own, whose key signs every version. The secret comes from secret_file or
        $WEIGHTCAST_SECRET. ``keep_versions`` applies to a local store. A mistyped keyword or a
        value of the wrong type raises TypeError naming it."""
        self._snapshots = None  # DeviceSnapshots, from the first publish_async of GPU tensors
        self._memory = memory is True
        self.store = _options.path("store", store)
        self.channel = _options.text("channel", channel)
        options = _options.check(
            "Publisher", publisher_options, self._OPTIONS,
            also=("store", "channel", "coordinator", "secret_file", "chunk_size",
                  "keep_versions", "memory", "device_checks"))
        device_checks = _options.boolean("device_checks", device_checks)
        chunk_size = (_weightcast.AUTO_CHUNK_SIZE if chunk_size in (None, "auto")
                      else _options.size("chunk_size", chunk_size))
        keep_versions = _options.integer("keep_versions", keep_versions)
        if not isinstance(memory, bool):
            raise TypeError(f"memory must be a bool, not {type(memory).__name__} {memory!r}")
        if memory:
            if coordinator is not None or secret_file is not None or options or device_checks:
                raise _weightcast.InvalidArgumentError(
                    "memory=True keeps versions in shared memory for samplers on this machine; "
                    "it takes no coordinator, secret_file, device_checks or publisher options")
            from ._live import _MemoryCore
            self._core = _MemoryCore(self.store, self.channel, chunk_size)
            self._remote = False
        elif coordinator is None:
            if secret_file is not None or options:
                raise _weightcast.InvalidArgumentError(
                    "secret_file and publisher options need a coordinator")
            self._core = _weightcast._Publisher(store=self.store, channel=self.channel,
                                                chunk_size=chunk_size,
                                                keep_versions=keep_versions,
                                                device_checks=device_checks)
            self._remote = False
        else:
            if keep_versions != 2:
                raise _weightcast.InvalidArgumentError(
                    "keep_versions applies to a local publisher only")
            self._core = _weightcast._Publisher(
                store=self.store, channel=self.channel,
                coordinator=_options.text("coordinator", coordinator),
                secret_file=None if secret_file is None else _options.path("secret_file",
                                                                            secret_file),
                chunk_size=chunk_size, device_checks=device_checks, **options)
            self._remote = True
        _open_publishers.add(self)

    def publish(self, tensors, step=None, slices=None):
        """Publishes ``tensors`` (dict name -> torch tensor or numpy array, any dtype safetensors
        has, bf16 included; GPU or non-contiguous tensors are copied to contiguous CPU memory
        first) as the next version, after any publish_async() still queued. Blocks until it is
        committed (and, with a coordinator, registered and seeding). Returns a PublishResult.

        Sharded (``rank=R, world=W`` and a shared ``writer_id``, docs/sharded_publish.md): each
        of the W ranks publishes its own tensors for the same step; this call returns once all W
        parts are in and the version is published (AbortedError when one did not come in time).
        ``slices`` marks tensors that are slices of a larger one: ``{name: (dim, start,
        extent)}``, e.g. rows ``[start, start + t.shape[0])`` of a tensor ``extent`` rows long;
        a Subscriber's version then holds the whole tensor under ``name``."""
        items = _publishable(tensors, step, slices)
        start = time.perf_counter()
        if self._snapshots is not None:
            self._snapshots.drain()  # after the publish_async calls before it
        out = self._core.publish(items, step)
        return _result(out, step, seconds=time.perf_counter() - start)

    def publish_async(self, tensors, step=None, copy=True):
        """Like publish(), but returns a :class:`PublishHandle` as soon as the tensors' bytes
        are snapshotted; the rest of the publish runs on the publisher's own thread, after the
        publishes submitted before it (in submission order).

        ``copy=True``: the bytes are copied once into memory the publisher owns, so the caller
        may change its tensors as soon as this returns. ``copy=False``: nothing is copied; the
        caller must not change the tensors until the handle is done() (the handle keeps them
        alive until then). Non-contiguous CPU tensors are first copied either way.

        Tensors in GPU memory: the snapshot is a copy on the device (``copy=True``), which is
        all the call waits for; the publisher's own thread copies it to host memory once the
        device has made it, overlapping the previous version's encoding (docs/gpu.md). Every
        later publish of this Publisher goes through that thread too, in submission order.

        Dropping the handle does not cancel the publish. close() (and interpreter exit, which
        closes every open Publisher) waits for queued publishes; ``close(abort_pending=True)``
        fails those not started with AbortedError."""
        if not isinstance(copy, bool):
            raise TypeError(f"copy must be a bool, not {type(copy).__name__} {copy!r}")
        _check_arguments(tensors, step)
        if not self._memory and (self._snapshots is not None or on_device(tensors)):
            if self._snapshots is None:
                self._snapshots = DeviceSnapshots(self._core, _publishable)
            return PublishHandle(self._snapshots.submit(tensors, step, copy), step)
        items = _publishable(tensors, step)
        return PublishHandle(self._core.publish_async(items, step, copy), step)

    def reserve(self, tensors):
        """Makes the memory the snapshots of ``tensors`` (the same dict publish takes; only
        their names, dtypes and shapes are used) will be copied into, so that the first
        ``publish_async`` costs one copy of the tensors, as every later one does, instead of also
        making fresh pages while the trainer waits. Call it once at start-up, e.g. right after
        building the model. Blocks while it makes them (``memory=True``: the two shared-memory
        slots; otherwise the snapshot buffers: about a copy of the tensors each). Optional;
        publishing other tensors later is fine."""
        _check_arguments(tensors, None)
        if not self._memory and (self._snapshots is not None or on_device(tensors)):
            return  # GPU snapshots are clones on the device (docs/gpu.md): nothing to make
        self._core.reserve(_publishable(tensors, None))

    def status(self):
        """Seeding progress of the newest version (dict: version, bytes_sent, peers, address,
        error, ...) for a coordinated publisher, else None."""
        return self._core.status() if self._remote else None

    def wait_until(self, until="replicated", timeout=None):
        """Waits for the publishes submitted before the call, then blocks (GIL released) until
        the newest version is "replicated" (every chunk held by another node) or "complete"
        (every live agent committed it), like `weightcast publish --until`.
        DeadlineExceededError after ``timeout`` seconds; AbortedError ("vN was aborted:
        <reason>") when the rollout aborts the version, since it can no longer get there."""
        if not self._remote:
            raise _weightcast.FailedPreconditionError("a local publisher seeds nothing")
        self._core.wait_until(until, timeout)

    def close(self, abort_pending=False):
        """Waits for the queued publishes (or, with ``abort_pending``, fails those not started
        yet with AbortedError), stops seeding (coordinated) and releases the store."""
        _open_publishers.discard(self)
        if self._snapshots is not None:
            if not abort_pending:
                self._snapshots.drain()
            self._snapshots.close()
            self._snapshots = None
        self._core.close(abort_pending)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
