"""Publisher: turn tensors in memory into a version of a channel, without a checkpoint."""

import collections
import collections.abc
import time

from . import _options, _tensors, _weightcast


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


class Publisher:
    """Publishes dicts of tensors as versions of a channel.

    The arguments come in the order :class:`Subscriber` takes them, store first:

    * ``Publisher(store, channel, coordinator=ADDR, secret_file=F)``: registers each version with
      the coordinator (delta against the previous one) and seeds it to the agents from ``store``.
    * ``Publisher(store, channel)``: commits each version into a local store only, for
      subscribers on the same machine (``Subscriber(store, channel)``).

    ``publish(tensors, step)`` writes the tensors straight into a safetensors file inside the
    store (no checkpoint of the trainer's own), builds the manifest and commits it; the GIL is
    released while it works.
    """

    _OPTIONS = {
        "listen": _options.text,
        "cluster": _options.text,
        "node_id": _options.integer,
        "connect_timeout": _options.seconds,
        "log_level": _options.text,
        "log_file": _options.path,
    }

    def __init__(self, store, channel, coordinator=None, secret_file=None, *, chunk_size=None,
                 keep_versions=2, **publisher_options):
        """``chunk_size``: bytes (int) or a size string as the CLI takes ("1MiB"); default
        ``DEFAULT_CHUNK_SIZE``. ``publisher_options`` (with a coordinator): listen
        ("127.0.0.1:0"), cluster, node_id, connect_timeout (s), log_level ("warn"; also debug,
        info, error), log_file (default stderr). The secret comes from secret_file or
        $WEIGHTCAST_SECRET. ``keep_versions`` applies to a local store. A mistyped keyword or a
        value of the wrong type raises TypeError naming it."""
        self.store = _options.path("store", store)
        self.channel = _options.text("channel", channel)
        options = _options.check(
            "Publisher", publisher_options, self._OPTIONS,
            also=("store", "channel", "coordinator", "secret_file", "chunk_size",
                  "keep_versions"))
        chunk_size = (_weightcast.DEFAULT_CHUNK_SIZE if chunk_size is None
                      else _options.size("chunk_size", chunk_size))
        keep_versions = _options.integer("keep_versions", keep_versions)
        if coordinator is None:
            if secret_file is not None or options:
                raise _weightcast.InvalidArgumentError(
                    "secret_file and publisher options need a coordinator")
            self._core = _weightcast._LocalPublisher(self.store, self.channel, chunk_size,
                                                     keep_versions)
            self._remote = False
        else:
            if keep_versions != 2:
                raise _weightcast.InvalidArgumentError(
                    "keep_versions applies to a local publisher only")
            self._core = _weightcast._Publisher(
                coordinator=_options.text("coordinator", coordinator), channel=self.channel,
                secret_file=None if secret_file is None else _options.path("secret_file",
                                                                            secret_file),
                store=self.store, chunk_size=chunk_size, **options)
            self._remote = True

    def publish(self, tensors, step=None):
        """Publishes ``tensors`` (dict name -> torch tensor or numpy array, any dtype safetensors
        has, bf16 included; GPU or non-contiguous tensors are copied to contiguous CPU memory
        first) as the next version. Returns a PublishResult."""
        if not isinstance(tensors, collections.abc.Mapping) or not tensors:
            raise _weightcast.InvalidArgumentError(
                "tensors must be a non-empty dict of name -> tensor")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise _weightcast.InvalidArgumentError(f"step must be an int, not {step!r}")
        items = [_tensors.to_publishable(name, value) for name, value in tensors.items()]
        metadata = {} if step is None else {"step": str(step)}
        start = time.perf_counter()
        out = self._core.publish(items, metadata)
        seconds = time.perf_counter() - start
        return PublishResult(version=out["version"], step=step, total_bytes=out["total_bytes"],
                             chunk_count=out["chunk_count"], root=out["root"],
                             wire_bytes=out.get("wire_bytes"), seconds=seconds)

    def status(self):
        """Seeding progress of the newest version (dict: version, bytes_sent, peers, address,
        ...) for a coordinated publisher, else None."""
        return self._core.status() if self._remote else None

    def wait_until(self, until="replicated", timeout=None):
        """Blocks (GIL released) until the newest version is "replicated" (every chunk held by
        another node) or "complete" (every live agent committed it), like `weightcast publish
        --until`. DeadlineExceededError after ``timeout`` seconds; AbortedError ("vN was aborted:
        <reason>") when the rollout aborts the version, since it can no longer get there."""
        if not self._remote:
            raise _weightcast.FailedPreconditionError("a local publisher seeds nothing")
        self._core.wait_until(until, timeout)

    def close(self):
        """Stops seeding (coordinated) and releases the store."""
        self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
