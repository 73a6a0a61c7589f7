// The sampler side: receive the committed versions of a channel and read their tensors in place,
// as spans of the version's mapped files (docs/cpp_api.md).
//
//   weightcast::SubscriberOptions options;
//   options.store = "/scratch/agent";
//   options.channel = "policy";
//   options.coordinator = "10.0.0.1:7000";      // empty: read a store an agent maintains
//   auto subscriber = weightcast::Subscriber::Open(options);
//   auto v = (*subscriber)->Wait();             // blocks until a version is committed
//   for (const weightcast::TensorView& t : v->tensors()) use(t.name, t.bytes);
//   auto next = (*subscriber)->Wait(v->version() + 1);
//   auto changes = (*subscriber)->Changed(v->version(), next->version());
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <weightcast/live.h>
#include <weightcast/options.h>
#include <weightcast/progress.h>
#include <weightcast/status.h>
#include <weightcast/tensor.h>

namespace weightcast {

// A file of a version: its path relative to the version's directory, and its size.
struct VersionFile {
  std::string path;
  uint64_t size = 0;
};

// Where a tensor lives in a version.
struct TensorLocation {
  std::string name;
  std::string dtype;  // safetensors spelling, "BF16"
  std::vector<uint64_t> shape;
  size_t file_index = 0;  // into ReceivedVersion::files()
  uint64_t offset = 0;    // of its first byte in that file
  uint64_t size = 0;      // bytes
};

// A whole tensor of a sharded publish, assembled from its slices (a copy: ReceivedVersion::
// whole_tensor).
struct WholeTensor {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view() const { return {name, dtype, shape, bytes}; }
};

// The bytes of one tensor that may differ between two versions: [begin, end) offsets into the
// tensor's data, sorted and merged.
struct TensorChange {
  std::string name;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
};

// One committed version, open: its files are mapped read-only once, when Wait returns it, and
// stay mapped (and readable, even after the store collects the version: committed files are
// unlinked, never rewritten) as long as any copy of the handle lives. Copies are cheap and share
// the mapping. Every method is const, never blocks and is safe from any thread.
class ReceivedVersion {
 public:
  ReceivedVersion();  // empty: no files, no tensors
  ~ReceivedVersion();
  ReceivedVersion(const ReceivedVersion&);
  ReceivedVersion& operator=(const ReceivedVersion&);
  ReceivedVersion(ReceivedVersion&&) noexcept;
  ReceivedVersion& operator=(ReceivedVersion&&) noexcept;

  const std::string& channel() const;
  Version version() const;
  std::optional<int64_t> step() const;        // the publisher's step, when it gave one
  const std::filesystem::path& path() const;  // the version's directory when it was opened
  const std::string& root() const;            // the root hash, lowercase hex
  uint64_t chunk_size() const;
  uint64_t total_size() const;
  uint32_t chunk_count() const;
  const std::map<std::string, std::string>& metadata() const;
  std::optional<Version> base_version() const;  // the base of a delta version

  const std::vector<VersionFile>& files() const;                // manifest order
  const std::vector<TensorLocation>& tensor_locations() const;  // offset order

  // Every tensor (offset order), or one by name (kNotFound), with `bytes` pointing into the
  // mapped files: valid as long as this handle or a copy of it lives. Read-only memory.
  // Of a sharded publish's sliced tensors these are the slices, by their NAME#START names.
  std::vector<TensorView> tensors() const;
  Result<TensorView> tensor(std::string_view name) const;

  // A tensor-subset agent's version (SubscriberOptions::tensors, `agent --tensors`): only the
  // tensors its patterns select were received, and only they are offered (tensors(),
  // tensor_locations(), tensor(), whole_tensor()); asking for another is kFailedPrecondition
  // naming the selection. The files hold zeros where the other tensors' bytes would be.
  bool partial() const;
  const std::vector<std::string>& tensor_patterns() const;     // empty for a whole version
  const std::vector<std::string>& unselected_tensors() const;  // not received, sorted

  // Names of the whole tensors a sharded publish's slices make (docs/sharded_publish.md), and
  // the slice names of one, ordered by start (empty for a tensor that is not sliced).
  std::vector<std::string> whole_tensor_names() const;
  std::vector<std::string> slices(std::string_view name) const;
  // The whole tensor `name` assembled from its NAME#START slices along their dimension, as
  // Python's v[name] offers it (a copy; a tensor that is not sliced comes back copied whole).
  // kNotFound for no such tensor; kFailedPrecondition when a slice is not held (a partial
  // version); kCorrupt when the slices do not fit together.
  Result<WholeTensor> whole_tensor(std::string_view name) const;

  // The whole file `index` as mapped (empty for an empty file or a bad index).
  std::span<const uint8_t> file_bytes(size_t index) const;

  // A descriptor of file `index`, open read-only, owned by the handle: valid until
  // CloseDescriptors or until the last copy is destroyed (-1 after, or for a bad index). For
  // callers that map the files themselves (the Python module does).
  int file_descriptor(size_t index) const;
  // Closes the descriptors (not the mappings) for every copy. Not thread-safe against
  // file_descriptor on another thread.
  void CloseDescriptors() const;

  // The library makes versions; Impl is opaque.
  struct Impl;
  explicit ReceivedVersion(std::shared_ptr<Impl> impl);

 private:
  std::shared_ptr<Impl> impl_;
};

// Options of Subscriber::Stream.
struct StreamOptions {
  // Tensor names handed over first, in this order, each only after the ones before it (an
  // engine that builds layer by layer); the others follow as their chunks complete. Empty: every
  // tensor as soon as its chunks are verified. A name the version lacks: kInvalidArgument.
  std::vector<std::string> order;
  // Each wait (Stream itself, each Next, WaitCommitted) fails with kDeadlineExceeded after
  // this. nullopt: no limit.
  std::optional<std::chrono::nanoseconds> timeout;
};

// A version read while it arrives (docs/streaming.md): each tensor is handed over once every
// chunk it spans is verified against the signed manifest, as a read-only view of the version's
// files (no copy), valid as long as this stream lives. All tensors handed over is not yet
// committed: WaitCommitted says which way the version ended. Not thread-safe.
class VersionStream {
 public:
  ~VersionStream();
  VersionStream(const VersionStream&) = delete;
  VersionStream& operator=(const VersionStream&) = delete;

  Version version() const;
  size_t tensor_count() const;  // tensors this stream hands over (a subset agent's: selected)
  size_t handed_over() const;

  // The next tensor every chunk of which is verified; nullopt after the last. Blocks until one
  // is, or `at_most` passed. kAborted with the abort's reason when the version is dropped first
  // (drop what was loaded from it); kAborted after Subscriber::Close; kDeadlineExceeded after
  // `at_most` or StreamOptions::timeout.
  Result<std::optional<TensorView>> Next(
      std::optional<std::chrono::nanoseconds> at_most = std::nullopt);
  // Blocks until the version is committed (OK) or aborted (kAborted, with the reason), or
  // `at_most` passed (kDeadlineExceeded, as after StreamOptions::timeout). Call it after the last
  // tensor, before serving what was loaded.
  Status WaitCommitted(std::optional<std::chrono::nanoseconds> at_most = std::nullopt);
  bool committed() const;

  // For callers that map the files themselves (the Python module does): the version's files,
  // where the tensor Next last returned lies in them, and a read-only descriptor of file
  // `index`, owned by the stream (-1 for a bad index).
  std::vector<VersionFile> files() const;
  TensorLocation last_location() const;
  int file_descriptor(size_t index) const;

  struct Impl;
  explicit VersionStream(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// Follows one channel. Without a coordinator it reads, read-only and without a lock, the store
// that an agent (or a local Publisher) on this machine maintains. With one it runs an agent in
// this process (its own threads) that joins the coordinator, fetches each version from its peers
// into `store`, verifies and commits it; the Subscriber reads what it commits.
//
// Thread-safety: every method is safe from any thread; Close wakes a blocked Wait.
class Subscriber {
 public:
  // Checks `options`. With a coordinator: also loads the secret, checks the store path and
  // starts the agent. Errors: kInvalidArgument (an option, a channel name), kNotFound (no
  // secret), kFailedPrecondition (with a coordinator: a store path that is not a store).
  // Without one, a path that is not a store fails the first Wait instead (see Wait).
  static Result<std::unique_ptr<Subscriber>> Open(SubscriberOptions options);
  // Close().
  ~Subscriber();
  Subscriber(const Subscriber&) = delete;
  Subscriber& operator=(const Subscriber&) = delete;

  // Blocks until the channel's committed current version is at least `min_version` (any version
  // when 0), then opens and maps it. Wakes on changes of the store (inotify), so it returns
  // within milliseconds of a commit. Errors:
  //  - kDeadlineExceeded once `timeout` passes (nullopt: no limit), naming what it waited for;
  //  - kAborted after Close;
  //  - without a coordinator: kFailedPrecondition at once for a store path that is a file or a
  //    directory with files but without a store's `.lock`; kNotFound when there is still no
  //    store 5 s after Open (an agent that starts a little later is waited for);
  //  - with one: the agent's own error once it stopped; kUnauthenticated (wrong secret) or
  //    kFailedPrecondition (wrong cluster, registration refused) as soon as the coordinator
  //    refused the agent; kUnavailable when the agent has not reached the coordinator within
  //    connect_timeout of Open;
  //  - kCorrupt for a committed file whose size disagrees with its manifest.
  Result<ReceivedVersion> Wait(Version min_version = Version(0),
                               std::optional<std::chrono::nanoseconds> timeout = std::nullopt);

  // Reads `version` while it arrives: waits for it to start arriving (or to be committed
  // already), then hands over its tensors as they are verified (VersionStream). With the
  // in-process agent, the agent also fetches the chunks in the stream's order first. Errors:
  // kAborted (the version was aborted before it arrived: the reason), kNotFound (the store is
  // past it and does not hold it), kInvalidArgument (a bad order), kDeadlineExceeded.
  Result<std::unique_ptr<VersionStream>> Stream(Version version, StreamOptions options = {});
  // The same, calling `on_tensor` for each tensor (an error from it ends the stream with that
  // error), then WaitCommitted: OK means every tensor was handed over and the version committed.
  Status Stream(Version version, const std::function<Status(const TensorView&)>& on_tensor,
                StreamOptions options = {});

  // The tensors of version `to` whose bytes may differ from version `since`, at chunk
  // granularity, from the two manifests' chunk hashes: a tensor at the same place with the same
  // dtype and shape reports only its bytes inside chunks that differ; a new tensor, or one whose
  // dtype, shape or place changed, is reported whole; tensors only in `since` are not reported.
  // Both versions must have been returned by Wait or still be in the store (kNotFound).
  Result<std::vector<TensorChange>> Changed(Version since, Version to) const;

  // The in-process agent's progress and the store's current version. kFailedPrecondition
  // without a coordinator. Never blocks beyond reading a small file.
  Result<NodeStatus> status() const;

  // Sends what LiveTensors::Attest found to the coordinator through the in-process agent, with
  // its next heartbeat (at once when one is held); `weightcast status`, /metrics and the fleet
  // page then say whether this node serves exactly the committed bytes (docs/live.md,
  // "Attestation"). kFailedPrecondition without a coordinator; kInvalidArgument for a digest
  // that is not 32 hex digits.
  Status ReportAttestation(const LiveAttestation& attestation);
  // Says that the live tensors this process serves hold `attestation.version` whole (it
  // matched and covered every tensor) and that the next apply writes into a copy not in use (a
  // flip: Python's LiveTensors(flip=True), or two LiveTensors in turn). The in-process agent
  // then keeps a delta onto that version as payloads for the next apply to patch in, instead of
  // decoding it and staging the whole version in the store: the store commits it partial, with
  // only its files' headers (docs/live.md, "Samplers that stage nothing"). Should an apply fail
  // then, the copy in use is untouched and the agent fetches the next version whole.
  // kFailedPrecondition without an agent, for an attestation that did not match or left out a
  // tensor, or a version the store no longer has.
  Status SetLiveBase(const LiveAttestation& attestation);

  bool has_agent() const;
  const std::filesystem::path& store() const;
  const std::string& channel() const;

  // "no version 3 of channel policy in store /x": what Wait(min_version) waits for, in words.
  std::string Describe(Version min_version) const;

  // Wakes a blocked Wait (and fails later ones) with kAborted and stops the agent (joining its
  // threads). Versions already returned stay valid. Idempotent; blocks while the agent stops.
  void Close();

  struct Impl;

 private:
  explicit Subscriber(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace weightcast
