// weightcast::Publisher (include/weightcast/publisher.h): a queue of publishes run in order on
// one thread of its own, each writing its tensors as a checkpoint directory inside the store and
// committing it (local) or handing it to publish::Publisher (coordinated).
#include <weightcast/publisher.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "client/common.h"
#include "client/tensor_writer.h"
#include "manifest/builder.h"
#include "manifest/part_assembly.h"
#include "publish/publisher.h"
#include "store/store.h"
#include "util/text.h"

namespace weightcast {

using Clock = std::chrono::steady_clock;

namespace {

Clock::time_point DeadlineAfter(std::optional<std::chrono::nanoseconds> timeout) {
  if (!timeout) return Clock::time_point::max();
  const auto now = Clock::now();
  if (*timeout >= Clock::time_point::max() - now) return Clock::time_point::max();
  return now + std::chrono::ceil<Clock::duration>(*timeout);
}

// What is left of `deadline` as a timeout for the internal calls (net::kForever: none).
net::Duration Remaining(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return net::kForever;
  return std::max<net::Duration>(deadline - Clock::now(), net::Duration::zero());
}

publish::SeedUntil ToInternal(SeedUntil until) {
  switch (until) {
    case SeedUntil::kReplicated:
      return publish::SeedUntil::kReplicated;
    case SeedUntil::kComplete:
      return publish::SeedUntil::kComplete;
    case SeedUntil::kNever:
      return publish::SeedUntil::kNever;
  }
  return publish::SeedUntil::kReplicated;
}

Status SliceRefused(const TensorView& t, std::string_view why) {
  return InvalidArgument("tensor " + t.name + ": slice (dim " + std::to_string(t.slice.dim) +
                         ", start " + std::to_string(t.slice.start) + ", extent " +
                         std::to_string(t.slice.extent) + ") refused: " + std::string(why));
}

// A slice is stored under a name of its own, "<name>#<start>".
std::string SliceName(const TensorView& t) {
  std::string name = t.name;
  name.push_back('#');
  name += std::to_string(t.slice.start);
  return name;
}

}  // namespace

struct PublishHandle::State {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<PublishResult>> result;  // set once, when the publish completed
  std::weak_ptr<Publisher::Impl> publisher;     // for WaitUntil

  void Finish(Result<PublishResult> r) {
    {
      std::lock_guard lock(mu);
      result.emplace(std::move(r));
    }
    cv.notify_all();
  }
  // The result, or kDeadlineExceeded once `deadline` passes first.
  Result<PublishResult> WaitFor(Clock::time_point deadline,
                                std::optional<std::chrono::nanoseconds> timeout) {
    std::unique_lock lock(mu);
    if (deadline == Clock::time_point::max()) {
      cv.wait(lock, [&] { return result.has_value(); });
    } else if (!cv.wait_until(lock, deadline, [&] { return result.has_value(); })) {
      return DeadlineExceeded("the publish is not done within " +
                              client::FormatSeconds(timeout.value_or(std::chrono::nanoseconds(0))));
    }
    return *result;
  }
};

struct Publisher::Impl : std::enable_shared_from_this<Publisher::Impl> {
  // One submitted publish. Invariant: `tensors` point into `owned` (copy) or into the caller's
  // memory, which `keep_alive` (if any) keeps valid, until the job is released.
  struct Job {
    std::vector<client::TensorBytes> tensors;
    std::unique_ptr<uint8_t[]> owned;
    uint64_t owned_size = 0;
    // A coordinated copy: `owned` holds the safetensors file of the version (tensors point into
    // it), published from memory (publish::Publisher::PublishImage).
    std::span<const uint8_t> image;
    std::shared_ptr<const void> keep_alive;
    std::optional<int64_t> step;
    std::string slices;  // a sharded rank's slices (kPartSlicesKey), renamed tensors
    Clock::time_point submitted;
    std::shared_ptr<PublishHandle::State> state;
  };

  explicit Impl(PublisherOptions o) : options(std::move(o)) {}

  Status Start();
  Result<PublishHandle> Submit(std::span<const TensorView> tensors, std::optional<int64_t> step,
                               AsyncOptions async);
  Result<std::string> NameSlices(std::span<const TensorView> tensors,
                                 std::vector<client::TensorBytes>& checked) const;
  void WorkerLoop();
  Result<PublishResult> Run(Job& job);
  Result<PublishResult> RunLocal(const Job& job, const std::map<std::string, std::string>& meta);
  Result<PublishResult> RunCoordinated(Job& job, const std::map<std::string, std::string>& meta);
  Status WaitUntil(SeedUntil until, Clock::time_point deadline);
  std::shared_ptr<publish::Publisher> Remote() const {
    std::lock_guard lock(mu);
    return remote;
  }
  void Close(PendingPublishes pending);
  // Snapshot buffers of finished publishes, reused by the next ones of the same size: a fresh
  // allocation of a model's size costs a page fault per 4 KiB on the first copy into it, which is
  // many times the copy itself (and the trainer waits for it).
  std::unique_ptr<uint8_t[]> TakeSpareBuffer(uint64_t size);
  // Whether a job is published from its file image (PublishImage): a coordinated publisher's
  // whole versions (a sharded rank's slices go through a directory).
  bool PublishesImages(const Job& job) const;
  // Copies the job's tensors into a buffer it then owns (a spare one when there is one): the
  // version's file image when `as_image`, else back to back. The tensors then point into it.
  Status CopyTensors(Job& job, bool as_image);
  // What CopyTensors lays the job's tensors out as: the version's file image (its layout and
  // size) when `as_image`, else their bytes back to back (their sum).
  struct SnapshotShape {
    std::optional<client::TensorsFileLayout> layout;
    uint64_t size = 0;
  };
  Result<SnapshotShape> ShapeOf(const Job& job, bool as_image) const;
  void KeepSpareBuffer(std::unique_ptr<uint8_t[]> buffer, uint64_t size);
  Status Reserve(std::span<const TensorView> tensors);

  const PublisherOptions options;
  std::unique_ptr<Store> store;  // local only; used by the worker thread alone
  // The image of the last version published from memory, the base of the next delta (the
  // publisher then reads no file back). Used by the worker thread alone.
  std::unique_ptr<uint8_t[]> held_image;
  uint64_t held_size = 0;
  publish::HeldBase held;
  // Coordinated only. Shared so that a WaitUntil or status on another thread keeps it alive
  // while Close stops it (Stop makes their blocking calls return).
  std::shared_ptr<publish::Publisher> remote;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Job> queue;  // guarded by mu
  bool busy = false;      // the worker runs a job; guarded by mu
  bool closing = false;   // no more submissions; guarded by mu
  // At most two: the one being published and the one the next snapshot fills. Guarded by mu.
  std::vector<std::pair<std::unique_ptr<uint8_t[]>, uint64_t>> spare_buffers;
  bool abort_queued = false;
  std::shared_ptr<PublishHandle::State> last;  // the newest submitted; guarded by mu
  std::thread worker;

  std::mutex close_mu;  // one Close at a time
  bool closed = false;  // guarded by close_mu
};

Status Publisher::Impl::Start() {
  WC_RETURN_IF_ERROR(ValidateChannelName(options.channel));
  if (options.chunk_size != ChunkSizeLimits::kAuto &&
      (options.chunk_size < ChunkSizeLimits::kMin || options.chunk_size > ChunkSizeLimits::kMax)) {
    return InvalidArgument("chunk_size " + std::to_string(options.chunk_size) + " is outside [" +
                           std::to_string(ChunkSizeLimits::kMin) + ", " +
                           std::to_string(ChunkSizeLimits::kMax) + "] and not 0 (auto)");
  }
  WC_RETURN_IF_ERROR(client::CheckStorePath(options.store));
  if (options.world > 1 && options.coordinator.empty()) {
    return InvalidArgument("a sharded publisher (world " + std::to_string(options.world) +
                           ") needs a coordinator, which assembles the ranks' parts");
  }
  if (options.coordinator.empty()) {
    StoreOptions store_options;
    store_options.keep_versions = options.keep_versions;
    WC_ASSIGN_OR_RETURN(Store opened, Store::Open(options.store, store_options));
    store = std::make_unique<Store>(std::move(opened));
  } else {
    publish::PublisherOptions po;
    WC_ASSIGN_OR_RETURN(po.log, client::MakeLogger("publish", options.log_level, options.log_file));
    WC_ASSIGN_OR_RETURN(po.secret, client::LoadSecret(options.secret));
    WC_ASSIGN_OR_RETURN(std::optional<node::CertificateMode> certified,
                        client::LoadCertificates(options.certificates));
    if (certified.has_value()) {
      po.trust_anchor = certified->anchor;
      po.signing_identity = certified->identity;
      po.tls = certified->tls;
    }
    po.coordinator = options.coordinator;
    po.channel = options.channel;
    po.store = options.store;
    po.build.chunk_size = options.chunk_size;
    po.build.device_checks = options.device_checks;
    po.listen = options.listen;
    WC_ASSIGN_OR_RETURN(po.transport, net::ParseTransportKind(options.transport));
    po.cluster = options.cluster;
    po.node_id = PeerId(options.node_id);
    if (po.node_id.value() == 0 && certified.has_value() && certified->identity->info().node_id) {
      po.node_id = PeerId(*certified->identity->info().node_id);  // its certificate's id
    }
    po.writer_id = options.writer_id;
    po.take_over = options.take_over;
    po.rank = options.rank;
    po.world = options.world;
    po.connect_timeout = options.connect_timeout;
    // Every directory it publishes is a scratch file of its own, written once and removed after
    // the import: linking it in is safe and copies nothing.
    po.import = publish::ImportPolicy::kHardlink;
    auto created = publish::Publisher::Create(std::move(po));
    if (!created.ok()) {
      // Giving up on an unreachable coordinator is kUnavailable whatever the last try said
      // (a connect that timed out says kDeadlineExceeded).
      if (created.status().code() == Code::kDeadlineExceeded) {
        return Unavailable(created.status().message());
      }
      return created.status();
    }
    remote = std::move(created).value();
  }
  worker = std::thread([this] { WorkerLoop(); });
  return Status::Ok();
}

// A slice is stored under a name of its own, "<name>#<start>", and the part's metadata says which
// whole tensor it belongs to; every rank names its slices alike, so the names are stable across
// steps (deltas line up) and unique across ranks.
Result<std::string> Publisher::Impl::NameSlices(std::span<const TensorView> tensors,
                                                std::vector<client::TensorBytes>& checked) const {
  std::vector<TensorSlice> slices;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    if (t.slice.extent == 0) continue;
    if (options.world <= 1) return SliceRefused(t, "this publisher is not sharded (world 1)");
    if (t.slice.dim >= t.shape.size() || t.slice.start > t.slice.extent ||
        t.shape[t.slice.dim] > t.slice.extent - t.slice.start) {
      return SliceRefused(t, "it does not fit in its extent along its dim");
    }
    checked[i].name = SliceName(t);
    slices.push_back({.whole = t.name,
                      .dim = t.slice.dim,
                      .slice = checked[i].name,
                      .start = t.slice.start,
                      .length = t.shape[t.slice.dim],
                      .extent = t.slice.extent});
  }
  return SlicesText(slices);
}

Result<PublishHandle> Publisher::Impl::Submit(std::span<const TensorView> tensors,
                                              std::optional<int64_t> step, AsyncOptions async) {
  WC_ASSIGN_OR_RETURN(std::vector<client::TensorBytes> checked, client::CheckTensors(tensors));
  Job job;
  WC_ASSIGN_OR_RETURN(job.slices, NameSlices(tensors, checked));
  job.submitted = Clock::now();
  job.step = step;
  job.tensors = std::move(checked);
  // A coordinated publisher of whole versions copies into the version's file image, which it
  // hashes, encodes and stores from memory; otherwise the tensors are copied back to back.
  if (async.copy) WC_RETURN_IF_ERROR(CopyTensors(job, PublishesImages(job)));
  job.keep_alive = std::move(async.keep_alive);
  auto state = std::make_shared<PublishHandle::State>();
  job.state = state;
  {
    std::lock_guard lock(mu);
    if (closing) return FailedPrecondition("publisher is closed");
    state->publisher = weak_from_this();
    last = state;
    queue.push_back(std::move(job));
  }
  cv.notify_all();
  return PublishHandle(std::move(state));
}

bool Publisher::Impl::PublishesImages(const Job& job) const {
  return !options.coordinator.empty() && job.slices.empty();
}

Result<Publisher::Impl::SnapshotShape> Publisher::Impl::ShapeOf(const Job& job,
                                                                bool as_image) const {
  SnapshotShape out;
  if (as_image) {
    WC_ASSIGN_OR_RETURN(out.layout, client::LayOutTensorsFile(job.tensors));
    out.size = out.layout->size;
    return out;
  }
  for (const client::TensorBytes& t : job.tensors) out.size += t.bytes.size();
  return out;
}

Status Publisher::Impl::CopyTensors(Job& job, bool as_image) {
  WC_ASSIGN_OR_RETURN(const SnapshotShape shape, ShapeOf(job, as_image));
  const std::optional<client::TensorsFileLayout>& layout = shape.layout;
  const uint64_t total = shape.size;
  std::unique_ptr<uint8_t[]> owned = TakeSpareBuffer(total);
  if (owned == nullptr) owned.reset(new (std::nothrow) uint8_t[std::max<uint64_t>(total, 1)]);
  if (owned == nullptr) {
    return ResourceExhausted("cannot allocate " + FormatBytes(total) +
                             " to copy the tensors (publish with copy off instead)");
  }
  uint64_t at = 0;
  if (layout) std::memcpy(owned.get(), layout->header.data(), layout->header.size());
  for (size_t i = 0; i < job.tensors.size(); ++i) {
    client::TensorBytes& t = job.tensors[i];
    if (layout) at = layout->offsets[i];
    if (!t.bytes.empty()) std::memcpy(owned.get() + at, t.bytes.data(), t.bytes.size());
    t.bytes = {owned.get() + at, t.bytes.size()};
    at += t.bytes.size();
  }
  if (layout) job.image = {owned.get(), total};
  job.owned = std::move(owned);
  job.owned_size = total;
  return Status::Ok();
}

Status Publisher::Impl::Reserve(std::span<const TensorView> tensors) {
  WC_ASSIGN_OR_RETURN(std::vector<client::TensorBytes> checked, client::CheckTensors(tensors));
  Job job;
  WC_ASSIGN_OR_RETURN(job.slices, NameSlices(tensors, checked));
  job.tensors = std::move(checked);
  const bool as_image = PublishesImages(job);
  WC_ASSIGN_OR_RETURN(const SnapshotShape shape, ShapeOf(job, as_image));
  const uint64_t total = shape.size;
  {
    std::lock_guard lock(mu);
    if (closing) return FailedPrecondition("publisher is closed");
  }
  for (int i = as_image ? 2 : 1; i > 0; --i) {
    std::unique_ptr<uint8_t[]> buffer(new (std::nothrow) uint8_t[std::max<uint64_t>(total, 1)]);
    if (buffer == nullptr) return ResourceExhausted("cannot allocate " + FormatBytes(total));
    std::memset(buffer.get(), 0, total);  // the pages are made here, not in the snapshot
    KeepSpareBuffer(std::move(buffer), total);
  }
  return Status::Ok();
}

std::unique_ptr<uint8_t[]> Publisher::Impl::TakeSpareBuffer(uint64_t size) {
  std::lock_guard lock(mu);
  for (auto it = spare_buffers.begin(); it != spare_buffers.end(); ++it) {
    if (it->second == size) {
      std::unique_ptr<uint8_t[]> out = std::move(it->first);
      spare_buffers.erase(it);
      return out;
    }
  }
  return nullptr;
}

void Publisher::Impl::KeepSpareBuffer(std::unique_ptr<uint8_t[]> buffer, uint64_t size) {
  constexpr size_t kMaxSpare = 2;
  std::lock_guard lock(mu);
  if (closing) return;
  spare_buffers.emplace_back(std::move(buffer), size);
  if (spare_buffers.size() > kMaxSpare) spare_buffers.erase(spare_buffers.begin());
}

void Publisher::Impl::WorkerLoop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return !queue.empty() || closing; });
      if (queue.empty()) return;  // closing, and nothing left
      job = std::move(queue.front());
      queue.pop_front();
      busy = true;
    }
    Result<PublishResult> result = Run(job);
    std::shared_ptr<PublishHandle::State> state = std::move(job.state);
    // Release the caller's buffers (and keep our copy for the next snapshot) before the handle
    // says done: from then on the caller may change them.
    if (job.owned != nullptr) KeepSpareBuffer(std::move(job.owned), job.owned_size);
    job = Job();
    state->Finish(std::move(result));
    {
      std::lock_guard lock(mu);
      busy = false;
    }
    cv.notify_all();
  }
}

Result<PublishResult> Publisher::Impl::Run(Job& job) {
  std::map<std::string, std::string> metadata;
  if (job.step) metadata["step"] = std::to_string(*job.step);
  if (!job.slices.empty()) metadata[std::string(kPartSlicesKey)] = job.slices;
  Result<PublishResult> result =
      remote != nullptr ? RunCoordinated(job, metadata) : RunLocal(job, metadata);
  if (result.ok()) {
    result->step = job.step;
    result->seconds = std::chrono::duration<double>(Clock::now() - job.submitted).count();
  }
  return result;
}

Result<PublishResult> Publisher::Impl::RunLocal(const Job& job,
                                                const std::map<std::string, std::string>& meta) {
  WC_ASSIGN_OR_RETURN(std::filesystem::path dir,
                      client::PrepareScratchDir(store->root(), options.channel));
  WC_RETURN_IF_ERROR(client::WriteTensorsFile(dir / "model.safetensors", job.tensors));
  WC_ASSIGN_OR_RETURN(
      client::LocalPublishResult r,
      client::CommitDirectory(
          *store, options.channel, dir,
          {.chunk_size = options.chunk_size, .device_checks = options.device_checks}, meta));
  PublishResult out;
  out.version = r.version;
  out.total_bytes = r.total_bytes;
  out.chunk_count = r.chunk_count;
  out.root = ToHex(r.root);
  out.delta = r.delta;
  // What a sampler on this machine holding the previous version reads (docs/live.md).
  out.wire_bytes = r.wire_bytes;
  out.prepare_seconds = r.seconds;
  return out;
}

Result<PublishResult> Publisher::Impl::RunCoordinated(
    Job& job, const std::map<std::string, std::string>& meta) {
  Result<publish::PublishedVersion> published = Aborted("not published");
  Digest root{};
  // A publish without a copy (the caller waits for it) is copied here: into memory is cheaper
  // than writing a file and reading it back.
  if (job.image.empty() && job.owned == nullptr && PublishesImages(job)) {
    WC_RETURN_IF_ERROR(CopyTensors(job, true));
  }
  if (!job.image.empty()) {
    const publish::VersionImage image{"model.safetensors", job.image};
    published = remote->PublishImage(image, held_image != nullptr ? &held : nullptr, meta);
    if (!published.ok()) return published.status();
    root = published->root;
    // The published image is the next delta's base; the one it replaces becomes a spare.
    std::swap(held_image, job.owned);
    std::swap(held_size, job.owned_size);
    held = {published->version, root, job.image};
  } else {
    WC_ASSIGN_OR_RETURN(std::filesystem::path dir,
                        client::PrepareScratchDir(options.store, options.channel));
    WC_RETURN_IF_ERROR(client::WriteTensorsFile(dir / "model.safetensors", job.tensors));
    published = remote->PublishDirectory(dir, meta);
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // imported (linked or copied) into the store
    if (!published.ok()) return published.status();
    // The root, from the manifest the publisher committed (a read-only open takes no lock).
    StoreOptions read_only;
    read_only.read_only = true;
    WC_ASSIGN_OR_RETURN(Store read, Store::Open(options.store, read_only));
    WC_ASSIGN_OR_RETURN(Manifest manifest, read.GetManifest(options.channel, published->version));
    root = manifest.root;
  }
  PublishResult out;
  out.version = published->version;
  out.total_bytes = published->model_bytes;
  out.chunk_count = published->chunks;
  out.root = ToHex(root);
  out.delta = published->delta;
  // What a node that holds the previous version receives: the payloads of a delta, or every
  // chunk of a full version.
  out.wire_bytes = published->delta ? published->payload_bytes : published->model_bytes;
  out.prepare_seconds = published->prepare_seconds;
  return out;
}

Status Publisher::Impl::WaitUntil(SeedUntil until, Clock::time_point deadline) {
  std::shared_ptr<publish::Publisher> seeder = Remote();
  if (seeder == nullptr) {
    if (options.coordinator.empty()) {
      return FailedPrecondition("a local publisher seeds nothing");
    }
    return FailedPrecondition("publisher is closed");
  }
  return seeder->WaitUntil(ToInternal(until), Remaining(deadline));
}

void Publisher::Impl::Close(PendingPublishes pending) {
  std::lock_guard close_lock(close_mu);
  if (closed) return;
  std::deque<Job> dropped;
  {
    std::lock_guard lock(mu);
    closing = true;
    spare_buffers.clear();
    if (pending == PendingPublishes::kAbort) dropped.swap(queue);
  }
  cv.notify_all();
  for (Job& job : dropped) {
    std::shared_ptr<PublishHandle::State> state = std::move(job.state);
    job = Job();
    state->Finish(Aborted("the publisher was closed before this publish started"));
  }
  std::shared_ptr<publish::Publisher> seeder = Remote();
  // Stopping the seeder makes a running PublishDirectory return (kAborted) instead of waiting
  // out an unreachable coordinator.
  if (pending == PendingPublishes::kAbort && seeder != nullptr) seeder->Stop();
  if (worker.joinable()) worker.join();
  // The last image is read until the seeder stops: its store commit runs behind its announce.
  if (seeder != nullptr) seeder->Stop();
  held_image.reset();
  {
    std::lock_guard lock(mu);
    remote.reset();
  }
  store.reset();
  closed = true;
}

PublishHandle::PublishHandle() = default;
PublishHandle::~PublishHandle() = default;
PublishHandle::PublishHandle(const PublishHandle&) = default;
PublishHandle& PublishHandle::operator=(const PublishHandle&) = default;
PublishHandle::PublishHandle(PublishHandle&&) noexcept = default;
PublishHandle& PublishHandle::operator=(PublishHandle&&) noexcept = default;
PublishHandle::PublishHandle(std::shared_ptr<State> state) : state_(std::move(state)) {}

bool PublishHandle::done() const {
  if (state_ == nullptr) return false;
  std::lock_guard lock(state_->mu);
  return state_->result.has_value();
}

Result<PublishResult> PublishHandle::Wait(std::optional<std::chrono::nanoseconds> timeout) const {
  if (state_ == nullptr) return FailedPrecondition("empty PublishHandle");
  return state_->WaitFor(DeadlineAfter(timeout), timeout);
}

Status PublishHandle::WaitUntil(SeedUntil until,
                                std::optional<std::chrono::nanoseconds> timeout) const {
  if (state_ == nullptr) return FailedPrecondition("empty PublishHandle");
  const Clock::time_point deadline = DeadlineAfter(timeout);
  Result<PublishResult> result = state_->WaitFor(deadline, timeout);
  if (!result.ok()) return result.status();
  std::shared_ptr<Publisher::Impl> publisher = state_->publisher.lock();
  if (publisher == nullptr) return FailedPrecondition("publisher is closed");
  return publisher->WaitUntil(until, deadline);
}

Result<std::unique_ptr<Publisher>> Publisher::Open(PublisherOptions options) {
  auto impl = std::make_shared<Impl>(std::move(options));
  WC_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<Publisher>(new Publisher(std::move(impl)));
}

Publisher::Publisher(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Publisher::~Publisher() { Close(PendingPublishes::kFinish); }

Result<PublishResult> Publisher::Publish(std::span<const TensorView> tensors,
                                         std::optional<int64_t> step) {
  AsyncOptions in_place;
  in_place.copy = false;  // the caller's bytes stay valid: we wait below
  WC_ASSIGN_OR_RETURN(PublishHandle handle, PublishAsync(tensors, step, std::move(in_place)));
  return handle.Wait();
}

Result<PublishHandle> Publisher::PublishAsync(std::span<const TensorView> tensors,
                                              std::optional<int64_t> step, AsyncOptions options) {
  return impl_->Submit(tensors, step, std::move(options));
}

Status Publisher::Reserve(std::span<const TensorView> tensors) { return impl_->Reserve(tensors); }

Status Publisher::WaitUntil(SeedUntil until, std::optional<std::chrono::nanoseconds> timeout) {
  const Clock::time_point deadline = DeadlineAfter(timeout);
  std::shared_ptr<PublishHandle::State> last;
  {
    std::lock_guard lock(impl_->mu);
    last = impl_->last;
  }
  if (impl_->options.coordinator.empty()) {
    return FailedPrecondition("a local publisher seeds nothing");
  }
  if (last != nullptr) {
    // A failed publish does not stop the wait: the newest version seeded is still one to wait
    // for. Only the deadline does.
    Result<PublishResult> waited = last->WaitFor(deadline, timeout);
    if (!waited.ok() && waited.status().code() == Code::kDeadlineExceeded) return waited.status();
  }
  return impl_->WaitUntil(until, deadline);
}

Result<NodeStatus> Publisher::status() const {
  std::shared_ptr<publish::Publisher> seeder = impl_->Remote();
  if (seeder == nullptr) {
    if (impl_->options.coordinator.empty()) {
      return FailedPrecondition("a local publisher seeds nothing");
    }
    return FailedPrecondition("publisher is closed");
  }
  const node::SwarmProgress p = seeder->progress();
  NodeStatus s = client::ToNodeStatus(p);
  s.address = seeder->address();
  s.node_id = seeder->node_id().value();
  s.running = !seeder->stopped();
  return s;
}

bool Publisher::coordinated() const { return !impl_->options.coordinator.empty(); }
const std::filesystem::path& Publisher::store() const { return impl_->options.store; }
const std::string& Publisher::channel() const { return impl_->options.channel; }

void Publisher::Close(PendingPublishes pending) { impl_->Close(pending); }

}  // namespace weightcast
