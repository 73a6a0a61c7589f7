// The trainer side: publish tensors held in memory as versions of a channel, without writing a
// checkpoint of the trainer's own (docs/cpp_api.md).
//
//   weightcast::PublisherOptions options;
//   options.store = "/scratch/publisher";
//   options.channel = "policy";
//   options.coordinator = "10.0.0.1:7000";             // empty: a local store only
//   options.secret.secret_file = "/etc/weightcast/secret";
//   auto publisher = weightcast::Publisher::Open(options);
//   if (!publisher.ok()) return publisher.status();
//   std::vector<weightcast::TensorView> tensors = {{"w", "F32", {2, 3}, bytes}};
//   auto result = (*publisher)->Publish(tensors, /*step=*/7);           // blocks
//   auto handle = (*publisher)->PublishAsync(tensors, 8);               // returns at once
//   auto done = handle->Wait();
//
// Each publish writes the tensors as one safetensors file (ordered by element width, then name,
// so the same model lands at the same offsets every step and deltas line up chunk by chunk)
// inside the store, builds its manifest and commits it; with a coordinator it is also a delta
// against the previous version, signed, registered and seeded to the fleet from this process.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <weightcast/options.h>
#include <weightcast/progress.h>
#include <weightcast/status.h>
#include <weightcast/tensor.h>

namespace weightcast {

// What one publish did.
struct PublishResult {
  Version version;
  std::optional<int64_t> step;  // as given to Publish; stored in the manifest's metadata
  uint64_t total_bytes = 0;     // the version's bytes
  uint32_t chunk_count = 0;
  std::string root;  // the root hash (the version's identity), lowercase hex
  // Whether it is a delta against the previous version, and what a node (or, for a local
  // publisher, a sampler on this machine applying the delta file) that holds that version
  // receives: the delta's payloads, or every byte of a full version.
  bool delta = false;
  std::optional<uint64_t> wire_bytes;
  double prepare_seconds = 0;  // manifest + delta + import (+ delta file, local)
  double seconds = 0;          // from the Publish/PublishAsync call until it completed
};

// When WaitUntil returns (as `weightcast publish --until`).
enum class SeedUntil {
  kReplicated,  // every chunk of the version is held by at least one other node
  kComplete,    // every live agent following the channel has committed it
  kNever,       // only a timeout or Close ends the wait
};
// "replicated", "complete" or "never"; kInvalidArgument otherwise.
Result<SeedUntil> ParseSeedUntil(std::string_view text);

struct AsyncOptions {
  // true: PublishAsync copies the tensors' bytes (once, into memory the publisher owns and frees
  // when the publish is done) before it returns; the caller may change or free its tensors at
  // once. false: no copy; the caller must keep every tensor's bytes alive and unchanged until
  // the handle is done() (what it reads then is what gets published).
  bool copy = true;
  // Dropped (on the publisher's thread) once the publish no longer reads the tensors' bytes, to
  // tie the life of the caller's buffers to the publish when copy is false.
  std::shared_ptr<const void> keep_alive;
};

// What Close does with publishes queued (or running) when it is called.
enum class PendingPublishes {
  kFinish,  // wait until each has completed, in order
  kAbort,   // fail those not started yet with kAborted; stop the running one where it blocks
};

class Publisher;

// One publish submitted with PublishAsync. A cheap, copyable reference to shared state: copies
// see the same publish. Dropping every copy does not cancel the publish. Every method is safe
// from any thread; a default-constructed handle is empty (each method: kFailedPrecondition).
class PublishHandle {
 public:
  PublishHandle();
  ~PublishHandle();
  PublishHandle(const PublishHandle&);
  PublishHandle& operator=(const PublishHandle&);
  PublishHandle(PublishHandle&&) noexcept;
  PublishHandle& operator=(PublishHandle&&) noexcept;

  // Whether the publish has completed (succeeded or failed). Never blocks.
  bool done() const;

  // Blocks until the publish has completed (then its result: what Publish returns) or `timeout`
  // passes (kDeadlineExceeded; the publish goes on). nullopt: no limit.
  Result<PublishResult> Wait(std::optional<std::chrono::nanoseconds> timeout = std::nullopt) const;

  // Blocks until the publish has completed, then as Publisher::WaitUntil (for the newest version
  // seeded: this one unless a later publish completed since). The publish's own error if it
  // failed; kFailedPrecondition for a local publisher; kDeadlineExceeded after `timeout` in all.
  Status WaitUntil(SeedUntil until,
                   std::optional<std::chrono::nanoseconds> timeout = std::nullopt) const;

  // The library makes handles; State is opaque.
  struct State;
  explicit PublishHandle(std::shared_ptr<State> state);

 private:
  std::shared_ptr<State> state_;
};

// Thread-safety: every method is safe from any thread. Publishes run one at a time on the
// publisher's own thread, in the order they were submitted (Publish and PublishAsync alike).
class Publisher {
 public:
  // Checks `options`, opens (creating if needed) and locks the store. With a coordinator: loads
  // the secret, starts serving peers on `listen`, connects and registers (retrying until
  // connect_timeout). Blocks for that long at most. Errors: kInvalidArgument (an option),
  // kFailedPrecondition (a store path that is not a store, a wrong cluster), kUnavailable (the
  // store is in use by another process, or the coordinator cannot be reached),
  // kUnauthenticated (the coordinator refused our secret), kNotFound (no secret).
  static Result<std::unique_ptr<Publisher>> Open(PublisherOptions options);

  // Close(PendingPublishes::kFinish): waits for the queued publishes.
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Publishes `tensors` as the next version and blocks until it is committed (and, with a
  // coordinator, registered and being seeded). The bytes are read in place, not copied; they
  // must not change during the call. kInvalidArgument, before anything is written, for an empty
  // list, an empty or duplicate name, an unknown dtype, or bytes whose size disagrees with dtype
  // and shape; kFailedPrecondition once closed; otherwise the publish's own error.
  Result<PublishResult> Publish(std::span<const TensorView> tensors,
                                std::optional<int64_t> step = std::nullopt);

  // Submits a publish and returns once the tensors' bytes are snapshotted (see AsyncOptions);
  // the rest (file, manifest, delta, import, registration, seeding) runs on the publisher's
  // thread after the publishes submitted before it. Never waits for those. The same argument
  // errors as Publish, at once.
  Result<PublishHandle> PublishAsync(std::span<const TensorView> tensors,
                                     std::optional<int64_t> step = std::nullopt,
                                     AsyncOptions options = {});

  // Makes the buffers that PublishAsync with copy snapshots these tensors into (the bytes are not
  // read), so that the first snapshot is one copy, as every later one is, instead of also
  // faulting in fresh pages while the caller waits. Call it at start-up; blocks while it makes
  // them (about a memcpy of the tensors each: two for a coordinated publisher, which keeps the
  // previous version's image as the next delta's base, else one). Optional: other tensors later
  // are fine. The same argument errors as Publish; kFailedPrecondition once closed.
  Status Reserve(std::span<const TensorView> tensors);

  // Waits for the publishes submitted before the call, then until `until` holds for the newest
  // version seeded (OK), `timeout` passes (kDeadlineExceeded) or Close (kAborted). kAborted
  // ("vN was aborted: <reason>") as well when the rollout aborts the version, since it can no
  // longer get there. kFailedPrecondition for a local publisher, which seeds nothing.
  Status WaitUntil(SeedUntil until, std::optional<std::chrono::nanoseconds> timeout = std::nullopt);

  // The seeder's progress for the newest version. kFailedPrecondition for a local publisher or
  // once closed. Never blocks.
  Result<NodeStatus> status() const;

  bool coordinated() const;  // whether it has a coordinator
  const std::filesystem::path& store() const;
  const std::string& channel() const;

  // Deals with the pending publishes as `pending` says, stops seeding, joins the publisher's
  // threads and releases the store. Later calls fail with kFailedPrecondition; handles stay
  // valid (their results were set). Idempotent; blocks. A coordinated publish waits out a
  // coordinator that went away (as Publish does), so kFinish waits for it too; kAbort does not.
  // Safe at process exit as long as the caller's buffers of copy-false publishes still live.
  void Close(PendingPublishes pending = PendingPublishes::kFinish);

  struct Impl;

 private:
  explicit Publisher(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace weightcast
