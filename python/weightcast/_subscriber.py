"""Subscriber: receive the committed versions of a channel into memory-mapped views."""

import os
import time

from . import _options, _stream, _weightcast
from ._version import Version


def _version_number(value, what):
    if isinstance(value, Version):
        return value.version
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _weightcast.InvalidArgumentError(
            f"{what} must be a version number (int >= 0) or a Version, not {value!r}")
    return value


class Subscriber:
    """Follows one channel and hands out its committed versions.

    Two modes:

    * ``Subscriber(store, channel)``: reads the store that a ``weightcast agent`` on this machine
      maintains (read-only; it never changes the store and can run beside the agent).
    * ``Subscriber(store, channel, coordinator=ADDR, secret_file=F)``: runs an agent inside this
      process (its own threads, the GIL released) that joins the coordinator, fetches each version
      from its peers into ``store`` and commits it; the subscriber reads what it commits.

    ``wait()`` blocks (without holding the GIL) until a version is committed and returns it as a
    :class:`Version`. ``changed(since)`` tells which tensor bytes differ between two versions so a
    sampler can update only those. Errors are :class:`weightcast.Error` subclasses.
    """

    _OPTIONS = {
        "listen": _options.text,
        "transport": _options.text,
        "rack": _options.text,
        "cluster": _options.text,
        "node_id": _options.integer,
        "upload_limit": _options.size,
        "download_limit": _options.size,
        "metrics": _options.text,
        "connect_timeout": _options.seconds,
        "log_level": _options.text,
        "log_file": _options.path,
        "ca": _options.path,
        "certificate": _options.path,
        "key": _options.path,
        "tensors": lambda _keyword, value: list(value),
    }

    def __init__(self, store, channel, coordinator=None, secret_file=None, *, memory=False,
                 **agent_options):
        """``agent_options`` (with a coordinator): listen ("127.0.0.1:0"), transport
        ("tcp", "auto" or "ucx"), rack, cluster, node_id,
        upload_limit and download_limit (bytes/s: an int or a size string like "100MiB"),
        metrics ("ip:port" for /metrics), connect_timeout (s, default 5: wait() raises
        UnavailableError when the agent has not reached the coordinator that long after the
        Subscriber was made), log_level ("warn"; also debug, info, error) and log_file (default
        stderr); ca, certificate and key: certificate mode (docs/security.md), the cluster CA's
        certificate and this node's own. The secret comes from secret_file or $WEIGHTCAST_SECRET. A wrong secret makes
        wait() raise UnauthenticatedError as soon as the coordinator refuses the agent; a store
        path that is not a store raises FailedPreconditionError here. A mistyped keyword or a
        value of the wrong type raises TypeError naming it. Without a
        coordinator, a ``store`` that is not a store (a file, a directory without the store's
        ``.lock``) makes wait() raise FailedPreconditionError at once, and one that does not
        exist NotFoundError once it is still missing 5 s after the Subscriber was made.

        ``tensors=["mlp.*#0", ...]`` (with a coordinator): the agent fetches only the tensors
        whose names match a pattern (globs: * and ?; a sharded publish's slices are named
        NAME#START) and the files' headers, and commits each version partial: its
        :class:`Version` offers only those tensors, and reading another raises
        FailedPreconditionError (docs/sharded_publish.md, "Tensor subsets")."""
        self.channel = _options.text("channel", channel)
        self.store = _options.path("store", store)
        self._last = None
        if "tensors" in agent_options:
            tensors = agent_options["tensors"]
            if (isinstance(tensors, str) or not isinstance(tensors, (list, tuple))
                    or not all(isinstance(t, str) and t for t in tensors)):
                raise TypeError(f"tensors must be a list of tensor name patterns, not {tensors!r}")
            agent_options["tensors"] = list(tensors)
        options = _options.check("Subscriber", agent_options, self._OPTIONS,
                                 also=("store", "channel", "coordinator", "secret_file", "memory"))
        if not isinstance(memory, bool):
            raise TypeError(f"memory must be a bool, not {type(memory).__name__} {memory!r}")
        self._memory = memory
        self._closed = False
        self._made = time.monotonic()
        if memory:
            if coordinator is not None or secret_file is not None or options:
                raise _weightcast.InvalidArgumentError(
                    "memory=True follows a memory channel on this machine (Publisher(..., "
                    "memory=True)); it takes no coordinator, secret_file or agent options")
            self._core = None
        elif coordinator is None:
            if secret_file is not None or options:
                raise _weightcast.InvalidArgumentError(
                    "secret_file and agent options need a coordinator (without one the "
                    "subscriber only reads a store that an agent maintains)")
            self._core = _weightcast._StoreSubscriber(self.store, self.channel)
        else:
            self._core = _weightcast._StoreSubscriber.with_agent(
                store=self.store, channel=self.channel,
                coordinator=_options.text("coordinator", coordinator),
                secret_file=None if secret_file is None else _options.path("secret_file",
                                                                            secret_file),
                **options)

    def wait(self, min_version=None, timeout=None):
        """The channel's committed current version once it is at least ``min_version`` (any
        version when None). ``timeout`` in seconds (None: no limit); raises
        DeadlineExceededError (also a TimeoutError) when it passes. To follow every new version:
        ``v = sub.wait(); v = sub.wait(v.version + 1)``."""
        minimum = 0 if min_version is None else _version_number(min_version, "min_version")
        if self._memory:
            from ._live import MemoryVersion
            number = self._wait_memory(max(minimum, 1), timeout)
            self._last = number
            return MemoryVersion(number)
        version = Version(self._core.wait(minimum, timeout))
        self._last = version.version
        return version

    # A memory channel's wait runs in short slices so that close() from another thread and
    # Ctrl-C (KeyboardInterrupt, raised between slices) end it; the C++ wait sleeps on inotify,
    # so a new version wakes it at once whatever the slice.
    _MEMORY_SLICE = 0.1
    _MEMORY_APPEAR = 5.0  # a channel directory still missing this long after __init__: an error

    def _wait_memory(self, minimum, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        channel_dir = os.path.join(self.store, self.channel + ".memory")
        while True:
            if self._closed:
                raise _weightcast.AbortedError("the subscriber was closed")
            if not os.path.isdir(channel_dir):
                if os.path.exists(os.path.join(self.store, ".lock")):
                    raise _weightcast.FailedPreconditionError(
                        f"{self.store} is a weightcast store, not a memory channel's directory: "
                        f"read it with Subscriber({self.store!r}, {self.channel!r}) without "
                        "memory=True")
                if time.monotonic() - self._made > self._MEMORY_APPEAR:
                    raise _weightcast.NotFoundError(
                        f"no memory channel {self.channel!r} in {self.store} after "
                        f"{self._MEMORY_APPEAR:g} s: is a Publisher({self.store!r}, "
                        f"{self.channel!r}, memory=True) running on this machine?")
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise _weightcast.DeadlineExceededError(
                    f"no version {minimum} of memory channel {self.channel!r} in {self.store} "
                    f"within {timeout:g} s")
            wait = self._MEMORY_SLICE if deadline is None else min(self._MEMORY_SLICE,
                                                                   deadline - now)
            try:
                return _weightcast._wait_memory(str(self.store), self.channel, minimum, wait)
            except _weightcast.DeadlineExceededError:
                continue

    def stream(self, version, order=None, timeout=None, numpy=False):
        """Reads ``version`` while it arrives: a :class:`VersionStream` of (name, tensor)
        pairs, each handed over as soon as every chunk of it is verified (docs/streaming.md).
        ``order``: tensor names handed over first, in that order (an engine that builds layer by
        layer); with a coordinator the in-process agent also fetches their chunks first.
        ``timeout`` (s) bounds each wait. Waits for the version to start arriving; a version
        already committed streams at once. AbortedError (with the reason) when it was aborted;
        NotFoundError when the store is past it and does not hold it."""
        if self._memory:
            raise _weightcast.FailedPreconditionError(
                "stream() reads a version from a store; a memory channel keeps none")
        number = _version_number(version, "version")
        if order is not None and (isinstance(order, str) or
                                  not all(isinstance(n, str) for n in order)):
            raise TypeError(f"order must be a list of tensor names, not {order!r}")
        core = self._core.stream(number, list(order or []),
                                 None if timeout is None else float(timeout))
        return _stream.VersionStream(core, numpy=numpy)

    def changed(self, since_version, version=None):
        """[(tensor name, [(begin, end), ...])]: the byte ranges (offsets into each tensor's
        data) of ``version`` (default: the last one wait() returned) that may differ from
        ``since_version``, at chunk granularity, from the two manifests' chunk hashes. New
        tensors and tensors whose dtype, shape or place changed are listed whole; tensors
        that disappeared are not listed."""
        if self._memory:
            raise _weightcast.FailedPreconditionError(
                "changed() reads a store; a memory channel is read with update(LiveTensors)")
        since = _version_number(since_version, "since_version")
        if version is None:
            if self._last is None:
                raise _weightcast.FailedPreconditionError(
                    "changed() needs a version: call wait() first or pass version=")
            to = self._last
        else:
            to = _version_number(version, "version")
        return [(name, list(ranges)) for name, ranges in self._core.changed(since, to)]

    def update(self, live, version=None, attest=True):
        """Brings ``live`` (a :class:`LiveTensors`) to ``version`` (default: the last one wait()
        returned) and returns a dict: ``version``, ``from_version``, ``delta`` (patched from the
        payloads: only changed elements written), ``chunks_patched`` / ``_copied`` /
        ``_unchanged`` / ``_repaired`` (patched, failed the manifest's check, copied whole),
        ``payload_bytes``, ``copied_bytes``, ``apply_seconds`` and ``blocked_seconds`` (the time
        the live weights were unusable: the whole apply in place, the flip with ``flip=True``),
        ``note`` (why no delta was used, or what was repaired). A registered tensor missing from
        the version, or of another dtype or shape, raises FailedPreconditionError and leaves the
        live weights as they were. With ``flip=True``, ``caught_up`` says the idle copy was
        brought to the version in use chunk by chunk as it was patched (one pass over it).
        Blocks without the GIL.

        With ``attest=True`` (the default; not for a memory channel) the live weights, as they
        now are, are then hashed against the version (:meth:`attest`): ``attested`` in the dict,
        and with a coordinator the digest goes to it, so ``weightcast status``, /metrics and the
        fleet page say whether this node serves exactly the committed bytes. When the apply
        hashed every chunk as it wrote it (a flip's catch-up, a first apply), those hashes are
        the attestation (``seconds`` 0); otherwise one hash pass over the weights (XXH3-128,
        memory speed), after they hold the version."""
        if version is None:
            if self._last is None:
                raise _weightcast.FailedPreconditionError(
                    "update() needs a version: call wait() first or pass version=")
            to = self._last
        else:
            to = _version_number(version, "version")
        report = live._apply(self.store, self.channel, to, memory=self._memory)
        applied = report.pop("attestation", None)
        if attest and not self._memory:
            # An apply that hashed every chunk it wrote (a flip's catch-up, a first apply) has
            # made the attestation's pass already; otherwise the live weights are hashed again.
            report["attested"] = (self._report_attestation(live, applied) if applied is not None
                                  else self.attest(live))
        return report

    def attest(self, live):
        """Hashes ``live`` (a :class:`LiveTensors`, the copy in use after a flip) as it is now
        against the version it holds, and with a coordinator reports the digest to it (docs/
        live.md, "Attestation"). Returns a dict: ``version``, ``digest`` (32 hex digits),
        ``matches`` (equal to the digest of the version's signed bytes), ``every_tensor`` (every
        tensor of the version is registered) and ``seconds``. Call it again at any time (say,
        after an engine step that could have written into its weights) to catch bytes that
        changed since the apply. With a flipped ``live`` that matched and holds every tensor, the
        in-process agent then keeps the next delta as payloads for update() instead of staging
        the whole version (docs/live.md, "Samplers that stage nothing").
        FailedPreconditionError when the weights hold no known version; NotFoundError when the
        store no longer keeps it."""
        if self._memory:
            raise _weightcast.FailedPreconditionError(
                "attest() reads the version from a store; a memory channel keeps none")
        return self._report_attestation(live, live._attest(self.store, self.channel))

    def _report_attestation(self, live, attestation):
        if self._core is not None and self._core.has_agent:
            self._core.report_attestation(attestation["version"], attestation["digest"])
            if live.flip and attestation["matches"] and attestation["every_tensor"]:
                # The copy in use holds the version whole and the next update writes the other
                # one: the agent keeps the next delta as payloads instead of staging it (docs/
                # live.md, "Samplers that stage nothing").
                self._core.set_live_base(attestation["version"], attestation["digest"], True,
                                         True)
        return attestation

    def status(self):
        """Progress of the in-process agent (dict: version, bytes_received, peers,
        current_version, ...), or None without one."""
        return None if self._core is None else self._core.status()

    def close(self):
        """Stops the in-process agent (if any) and wakes a blocked wait() with AbortedError.
        Versions already returned stay valid."""
        self._closed = True
        if self._core is not None:
            self._core.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
