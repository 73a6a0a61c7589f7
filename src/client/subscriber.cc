// weightcast::Subscriber and ReceivedVersion (include/weightcast/subscriber.h): a StoreFollower
// on the store, plus, with a coordinator, an agent in this process that maintains it.
#include <weightcast/subscriber.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "client/agent_runner.h"
#include "client/assemble_slices.h"
#include "client/changed_tensors.h"
#include "client/common.h"
#include "client/store_follower.h"
#include "client/version_stream.h"
#include "coord/client.h"
#include "format/safetensors.h"
#include "manifest/part_assembly.h"
#include "util/text.h"

namespace weightcast {

using Clock = std::chrono::steady_clock;

struct ReceivedVersion::Impl {
  ~Impl() {
    for (const std::span<const uint8_t>& m : maps) {
      if (!m.empty()) ::munmap(const_cast<uint8_t*>(m.data()), m.size());
    }
  }

  // Maps every file of `opened` and describes its tensors.
  static Result<std::shared_ptr<Impl>> Make(client::OpenedVersion opened);

  client::OpenedVersion opened;
  std::string root;
  std::vector<VersionFile> files;
  std::vector<TensorLocation> tensors;  // of a partial version, only the selected ones
  std::vector<std::string> unselected;  // a partial version's other tensors (sorted)
  // Whole tensors of a sharded publish: name -> (dim, slice names ordered by start). Only those
  // whose every slice is offered.
  std::map<std::string, std::pair<uint32_t, std::vector<std::string>>, std::less<>> wholes;
  std::set<std::string, std::less<>> partial_wholes;  // whole tensors missing a slice
  std::vector<std::span<const uint8_t>> maps;         // one per file; empty for an empty file
  std::mutex fd_mu;  // guards opened.files against CloseDescriptors
};

Result<std::shared_ptr<ReceivedVersion::Impl>> ReceivedVersion::Impl::Make(
    client::OpenedVersion opened) {
  auto impl = std::make_shared<Impl>();
  const Manifest& m = *opened.manifest;
  impl->root = ToHex(m.root);
  for (size_t i = 0; i < m.files.size(); ++i) {
    impl->files.push_back({m.files[i].path, m.files[i].size});
    const uint64_t size = m.files[i].size;
    if (size == 0) {
      impl->maps.emplace_back();
      continue;
    }
    void* addr = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, opened.files[i].get(), 0);
    if (addr == MAP_FAILED) {
      return ErrnoStatus("mmap(" + (opened.dir / m.files[i].path).string() + ")", errno);
    }
    impl->maps.emplace_back(static_cast<const uint8_t*>(addr), size);
  }
  for (const ManifestTensor& t : m.tensors) {
    if (opened.partial != nullptr && !opened.partial->HoldsTensor(t.name)) {
      impl->unselected.push_back(t.name);
      continue;
    }
    TensorLocation location;
    location.name = t.name;
    location.dtype = std::string(DTypeName(t.dtype));
    location.shape = t.shape;
    location.file_index = t.file_index;
    location.offset = t.offset - m.files.at(t.file_index).offset;
    location.size = t.size;
    impl->tensors.push_back(std::move(location));
  }
  std::sort(impl->unselected.begin(), impl->unselected.end());
  WC_ASSIGN_OR_RETURN(std::vector<TensorSlice> slices, SlicesOf(m, kSlicesKey));
  std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) {
    return a.whole != b.whole ? a.whole < b.whole : a.start < b.start;
  });
  std::set<std::string> incomplete;
  for (const TensorSlice& s : slices) {
    if (opened.partial != nullptr && !opened.partial->HoldsTensor(s.slice)) {
      incomplete.insert(s.whole);
    }
    auto& [dim, names] = impl->wholes[s.whole];
    dim = s.dim;
    names.push_back(s.slice);
  }
  for (const std::string& name : incomplete) impl->wholes.erase(name);
  impl->partial_wholes.insert(incomplete.begin(), incomplete.end());
  impl->opened = std::move(opened);
  return impl;
}

ReceivedVersion::ReceivedVersion() = default;
ReceivedVersion::~ReceivedVersion() = default;
ReceivedVersion::ReceivedVersion(const ReceivedVersion&) = default;
ReceivedVersion& ReceivedVersion::operator=(const ReceivedVersion&) = default;
ReceivedVersion::ReceivedVersion(ReceivedVersion&&) noexcept = default;
ReceivedVersion& ReceivedVersion::operator=(ReceivedVersion&&) noexcept = default;
ReceivedVersion::ReceivedVersion(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

const std::string kEmptyString;
const std::filesystem::path kEmptyPath;
const std::map<std::string, std::string> kEmptyMap;
const std::vector<VersionFile> kNoFiles;
const std::vector<TensorLocation> kNoTensors;

}  // namespace

const std::string& ReceivedVersion::channel() const {
  return impl_ ? impl_->opened.channel : kEmptyString;
}
Version ReceivedVersion::version() const { return impl_ ? impl_->opened.version : Version(0); }
std::optional<int64_t> ReceivedVersion::step() const {
  auto it = metadata().find("step");
  if (it == metadata().end()) return std::nullopt;
  int64_t step = 0;
  const char* end = it->second.data() + it->second.size();
  auto [ptr, ec] = std::from_chars(it->second.data(), end, step);
  if (ec != std::errc() || ptr != end) return std::nullopt;
  return step;
}
const std::filesystem::path& ReceivedVersion::path() const {
  return impl_ ? impl_->opened.dir : kEmptyPath;
}
const std::string& ReceivedVersion::root() const { return impl_ ? impl_->root : kEmptyString; }
uint64_t ReceivedVersion::chunk_size() const {
  return impl_ ? impl_->opened.manifest->chunk_size : 0;
}
uint64_t ReceivedVersion::total_size() const {
  return impl_ ? impl_->opened.manifest->total_size() : 0;
}
uint32_t ReceivedVersion::chunk_count() const {
  return impl_ ? impl_->opened.manifest->chunk_count() : 0;
}
const std::map<std::string, std::string>& ReceivedVersion::metadata() const {
  return impl_ ? impl_->opened.manifest->metadata : kEmptyMap;
}
std::optional<Version> ReceivedVersion::base_version() const {
  if (!impl_ || !impl_->opened.manifest->delta) return std::nullopt;
  return impl_->opened.manifest->delta->base_version;
}
const std::vector<VersionFile>& ReceivedVersion::files() const {
  return impl_ ? impl_->files : kNoFiles;
}
const std::vector<TensorLocation>& ReceivedVersion::tensor_locations() const {
  return impl_ ? impl_->tensors : kNoTensors;
}

std::vector<TensorView> ReceivedVersion::tensors() const {
  std::vector<TensorView> out;
  if (!impl_) return out;
  out.reserve(impl_->tensors.size());
  for (const TensorLocation& t : impl_->tensors) {
    const std::span<const uint8_t> file = impl_->maps[t.file_index];
    out.push_back({t.name, t.dtype, t.shape,
                   t.size == 0 ? std::span<const uint8_t>() : file.subspan(t.offset, t.size)});
  }
  return out;
}

Result<TensorView> ReceivedVersion::tensor(std::string_view name) const {
  if (impl_ && std::binary_search(impl_->unselected.begin(), impl_->unselected.end(), name)) {
    std::string patterns;
    for (const std::string& p : impl_->opened.partial->patterns) {
      patterns += (patterns.empty() ? "" : " ") + p;
    }
    return FailedPrecondition("tensor " + std::string(name) + " of version " +
                              std::to_string(version().value()) + " of channel " + channel() +
                              " was not received: this version holds only the tensors of '" +
                              patterns + "' (a tensor-subset agent's)");
  }
  if (impl_) {
    for (const TensorLocation& t : impl_->tensors) {
      if (t.name != name) continue;
      const std::span<const uint8_t> file = impl_->maps[t.file_index];
      return TensorView{t.name, t.dtype, t.shape,
                        t.size == 0 ? std::span<const uint8_t>() : file.subspan(t.offset, t.size)};
    }
  }
  return NotFound("no tensor " + std::string(name) + " in version " +
                  std::to_string(version().value()) + " of channel " + channel());
}

bool ReceivedVersion::partial() const { return impl_ && impl_->opened.partial != nullptr; }

const std::vector<std::string>& ReceivedVersion::tensor_patterns() const {
  static const std::vector<std::string> kNone;
  return partial() ? impl_->opened.partial->patterns : kNone;
}

const std::vector<std::string>& ReceivedVersion::unselected_tensors() const {
  static const std::vector<std::string> kNone;
  return impl_ ? impl_->unselected : kNone;
}

std::vector<std::string> ReceivedVersion::whole_tensor_names() const {
  std::vector<std::string> out;
  if (impl_) {
    for (const auto& [name, slices] : impl_->wholes) out.push_back(name);
  }
  return out;
}

std::vector<std::string> ReceivedVersion::slices(std::string_view name) const {
  if (!impl_) return {};
  auto it = impl_->wholes.find(name);
  return it == impl_->wholes.end() ? std::vector<std::string>{} : it->second.second;
}

Result<WholeTensor> ReceivedVersion::whole_tensor(std::string_view name) const {
  if (!impl_) return NotFound("no tensor " + std::string(name) + " in an empty version");
  if (impl_->partial_wholes.count(name) != 0) {
    return FailedPrecondition("whole tensor " + std::string(name) + " of version " +
                              std::to_string(version().value()) +
                              " cannot be assembled: this version holds only some of its slices "
                              "(a tensor-subset agent's)");
  }
  const auto it = impl_->wholes.find(name);
  if (it == impl_->wholes.end()) {
    WC_ASSIGN_OR_RETURN(TensorView t, tensor(name));  // not sliced: the tensor itself, or its error
    return WholeTensor{t.name, t.dtype, t.shape, {t.bytes.begin(), t.bytes.end()}};
  }
  const auto& [dim, names] = it->second;
  std::vector<TensorView> parts;
  for (const std::string& slice : names) {
    WC_ASSIGN_OR_RETURN(TensorView t, tensor(slice));
    parts.push_back(std::move(t));
  }
  auto bytes = client::ConcatAlong(dim, parts);
  if (!bytes.ok()) {
    return Corrupt("whole tensor " + std::string(name) + " of version " +
                   std::to_string(version().value()) + ": " + bytes.status().message());
  }
  WholeTensor out{std::string(name), parts[0].dtype, parts[0].shape, std::move(bytes).value()};
  out.shape[dim] = 0;
  for (const TensorView& t : parts) out.shape[dim] += t.shape[dim];
  return out;
}

std::span<const uint8_t> ReceivedVersion::file_bytes(size_t index) const {
  if (!impl_ || index >= impl_->maps.size()) return {};
  return impl_->maps[index];
}

int ReceivedVersion::file_descriptor(size_t index) const {
  if (!impl_) return -1;
  std::lock_guard lock(impl_->fd_mu);
  if (index >= impl_->opened.files.size()) return -1;
  return impl_->opened.files[index].get();
}

void ReceivedVersion::CloseDescriptors() const {
  if (!impl_) return;
  std::lock_guard lock(impl_->fd_mu);
  impl_->opened.files.clear();
}

struct Subscriber::Impl {
  Impl(SubscriberOptions o, std::unique_ptr<client::StoreFollower> f)
      : options(std::move(o)), follower(std::move(f)), opened_at(Clock::now()) {}

  // With an agent: its failure, a refusal by the coordinator, or a coordinator it has not
  // reached within connect_timeout of Open. OK otherwise (and without an agent).
  Status AgentError() const;
  Result<ReceivedVersion> Opened(Result<client::OpenedVersion> opened) const;

  const SubscriberOptions options;
  // Invariant: `agent` is declared after `follower`, so it is stopped (and its on_exit, which
  // closes the follower, has run) before the follower is destroyed.
  std::unique_ptr<client::StoreFollower> follower;
  std::unique_ptr<client::AgentRunner> agent;
  const Clock::time_point opened_at;
  std::mutex close_mu;
  // Set by Close: streams end their waits with kAborted.
  std::shared_ptr<std::atomic<bool>> closed = std::make_shared<std::atomic<bool>>(false);
};

Status Subscriber::Impl::AgentError() const {
  if (agent == nullptr) return Status::Ok();
  if (agent->exited()) {
    const Status failure = agent->failure();
    if (!failure.ok()) return failure.WithContext("in-process agent");
    return Aborted("the in-process agent stopped");
  }
  Status error = agent->coordinator_error();
  if (error.ok()) return Status::Ok();
  if (coord::IsPermanentConnectError(error)) return error;
  if (!agent->registered() && Clock::now() - opened_at >= options.connect_timeout) {
    return Unavailable("the in-process agent has not reached the coordinator at " +
                       options.coordinator + " within " +
                       client::FormatSeconds(options.connect_timeout) + ": " + error.message());
  }
  return Status::Ok();
}

Result<ReceivedVersion> Subscriber::Impl::Opened(Result<client::OpenedVersion> opened) const {
  if (!opened.ok()) return opened.status();
  WC_ASSIGN_OR_RETURN(std::shared_ptr<ReceivedVersion::Impl> impl,
                      ReceivedVersion::Impl::Make(std::move(opened).value()));
  return ReceivedVersion(std::move(impl));
}

Result<std::unique_ptr<Subscriber>> Subscriber::Open(SubscriberOptions options) {
  WC_ASSIGN_OR_RETURN(std::unique_ptr<client::StoreFollower> follower,
                      client::StoreFollower::Create(options.store, options.channel));
  auto impl = std::make_unique<Impl>(std::move(options), std::move(follower));
  const SubscriberOptions& o = impl->options;
  if (!o.coordinator.empty()) {
    WC_RETURN_IF_ERROR(client::CheckStorePath(o.store));
    agent::AgentOptions a;
    a.coordinator = o.coordinator;
    a.store_dir = o.store.string();
    a.channel = o.channel;
    a.listen = o.listen;
    WC_ASSIGN_OR_RETURN(a.transport, net::ParseTransportKind(o.transport));
    a.rack = o.rack;
    a.metrics = o.metrics;
    a.upload_limit = o.upload_limit;
    a.download_limit = o.download_limit;
    a.tensor_patterns = o.tensors;
    WC_ASSIGN_OR_RETURN(a.secret, client::LoadSecret(o.secret));
    WC_ASSIGN_OR_RETURN(std::optional<node::CertificateMode> certified,
                        client::LoadCertificates(o.certificates));
    if (certified.has_value()) {
      a.trust_anchor = certified->anchor;
      a.tls = certified->tls;
    }
    a.cluster = o.cluster;
    a.node_id = PeerId(o.node_id);
    if (a.node_id.value() == 0 && certified.has_value() && certified->identity->info().node_id) {
      a.node_id = PeerId(*certified->identity->info().node_id);  // its certificate's id
    }
    WC_ASSIGN_OR_RETURN(metrics::Logger logger,
                        client::MakeLogger("agent", o.log_level, o.log_file));
    a.log = logger.AsLineFn();
    // Errors that need a person (a refused handshake) show at the default level, warn.
    a.log_error = [logger](std::string_view line) { logger.Error(line); };
    // Versions held as payloads were whole only in the live tensors of the process that kept
    // them: forgotten before a Wait could return one (the agent opens the store on its own
    // thread, later). A store that does not open (in use by another agent) is the agent's to
    // report, through Wait.
    if (Result<Store> store = Store::Open(o.store); store.ok()) {
      WC_RETURN_IF_ERROR(store->ForgetPayloadVersions(o.channel).status());
    }
    client::StoreFollower* f = impl->follower.get();
    // A dead agent wakes a blocked Wait, which then returns the agent's error.
    WC_ASSIGN_OR_RETURN(impl->agent, client::AgentRunner::Start(std::move(a), [f] { f->Close(); }));
  }
  return std::unique_ptr<Subscriber>(new Subscriber(std::move(impl)));
}

Subscriber::Subscriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Subscriber::~Subscriber() { Close(); }

Result<ReceivedVersion> Subscriber::Wait(Version min_version,
                                         std::optional<std::chrono::nanoseconds> timeout) {
  const Version wanted = min_version;
  const auto timed_out = [&] {
    return DeadlineExceeded(Describe(min_version) + " within " +
                            client::FormatSeconds(timeout.value_or(std::chrono::nanoseconds(0))));
  };
  if (impl_->agent == nullptr) {
    Result<client::OpenedVersion> opened = impl_->follower->Wait(wanted, timeout);
    if (!opened.ok() && opened.status().code() == Code::kDeadlineExceeded) return timed_out();
    return impl_->Opened(std::move(opened));
  }
  const Clock::time_point deadline =
      timeout ? Clock::now() + std::chrono::ceil<Clock::duration>(*timeout)
              : Clock::time_point::max();
  // The agent's health is looked at between slices of the wait.
  constexpr auto kSlice = std::chrono::milliseconds(100);
  while (true) {
    WC_RETURN_IF_ERROR(impl_->AgentError());
    const auto now = Clock::now();
    const std::chrono::nanoseconds slice =
        deadline == Clock::time_point::max()
            ? std::chrono::nanoseconds(kSlice)
            : std::min<std::chrono::nanoseconds>(
                  kSlice, std::max<Clock::duration>(deadline - now, Clock::duration::zero()));
    Result<client::OpenedVersion> opened = impl_->follower->Wait(wanted, slice);
    if (opened.ok()) return impl_->Opened(std::move(opened));
    if (opened.status().code() == Code::kAborted) {
      WC_RETURN_IF_ERROR(impl_->AgentError());
      return opened.status();
    }
    if (opened.status().code() != Code::kDeadlineExceeded) return opened.status();
    if (Clock::now() >= deadline) return timed_out();
  }
}

struct VersionStream::Impl {
  std::unique_ptr<client::VersionStreamCore> core;
  std::optional<std::chrono::nanoseconds> timeout;  // of each wait
  // The earlier of the timeout and `at_most`, from now.
  std::optional<client::VersionStreamCore::Clock::time_point> Until(
      std::optional<std::chrono::nanoseconds> at_most) const;
};

VersionStream::VersionStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VersionStream::~VersionStream() = default;
Version VersionStream::version() const { return impl_->core->version(); }
size_t VersionStream::tensor_count() const { return impl_->core->tensor_count(); }
size_t VersionStream::handed_over() const { return impl_->core->handed_over(); }
bool VersionStream::committed() const { return impl_->core->committed(); }
std::optional<client::VersionStreamCore::Clock::time_point> VersionStream::Impl::Until(
    std::optional<std::chrono::nanoseconds> at_most) const {
  std::optional<std::chrono::nanoseconds> wait = timeout;
  if (at_most.has_value()) wait = wait.has_value() ? std::min(*wait, *at_most) : *at_most;
  if (!wait.has_value()) return std::nullopt;
  return client::VersionStreamCore::Clock::now() +
         std::chrono::duration_cast<client::VersionStreamCore::Clock::duration>(*wait);
}

Result<std::optional<TensorView>> VersionStream::Next(
    std::optional<std::chrono::nanoseconds> at_most) {
  return impl_->core->Next(impl_->Until(at_most));
}
Status VersionStream::WaitCommitted(std::optional<std::chrono::nanoseconds> at_most) {
  return impl_->core->WaitCommitted(impl_->Until(at_most));
}
std::vector<VersionFile> VersionStream::files() const {
  std::vector<VersionFile> out;
  for (const ManifestFile& f : impl_->core->manifest().files) out.push_back({f.path, f.size});
  return out;
}
TensorLocation VersionStream::last_location() const {
  const client::VersionStreamCore& core = *impl_->core;
  const ManifestTensor& t = core.tensor_info(core.last_index());
  const ManifestFile& f = core.manifest().files[t.file_index];
  return TensorLocation{
      t.name, std::string(DTypeName(t.dtype)), t.shape, t.file_index, t.offset - f.offset, t.size};
}
int VersionStream::file_descriptor(size_t index) const {
  return impl_->core->file_descriptor(index);
}

Result<std::unique_ptr<VersionStream>> Subscriber::Stream(Version version, StreamOptions options) {
  if (impl_->closed->load()) return Aborted("the subscriber was closed");
  client::StreamSpec spec;
  spec.store = impl_->options.store;
  spec.channel = impl_->options.channel;
  spec.version = version;
  spec.order = std::move(options.order);
  spec.patterns = impl_->options.tensors;
  spec.closed = [closed = impl_->closed] { return closed->load(); };
  auto impl = std::make_unique<VersionStream::Impl>();
  impl->timeout = options.timeout;
  WC_ASSIGN_OR_RETURN(impl->core,
                      client::VersionStreamCore::Open(std::move(spec), impl->Until(std::nullopt)));
  if (impl_->agent != nullptr && !impl->core->committed()) {
    impl_->agent->PreferChunks(version, impl->core->WantedChunkOrder());
  }
  return std::make_unique<VersionStream>(std::move(impl));
}

Status Subscriber::Stream(Version version,
                          const std::function<Status(const TensorView&)>& on_tensor,
                          StreamOptions options) {
  WC_ASSIGN_OR_RETURN(std::unique_ptr<VersionStream> stream, Stream(version, std::move(options)));
  while (true) {
    WC_ASSIGN_OR_RETURN(std::optional<TensorView> tensor, stream->Next());
    if (!tensor.has_value()) break;
    WC_RETURN_IF_ERROR(on_tensor(*tensor));
  }
  return stream->WaitCommitted();
}

Result<std::vector<TensorChange>> Subscriber::Changed(Version since, Version to) const {
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> from, impl_->follower->ManifestOf(since));
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> target, impl_->follower->ManifestOf(to));
  return client::ChangedTensors(*from, *target);
}

Result<NodeStatus> Subscriber::status() const {
  if (impl_->agent == nullptr) {
    return FailedPrecondition("a subscriber without a coordinator runs no agent");
  }
  const client::AgentRunner& agent = *impl_->agent;
  const node::SwarmProgress p = agent.progress();
  NodeStatus s = client::ToNodeStatus(p);
  s.running = !agent.exited();
  if (s.error.empty()) {
    const Status failure = s.running ? agent.coordinator_error() : agent.failure();
    if (!failure.ok()) s.error = failure.ToString();
  }
  s.address = agent.address();
  s.node_id = agent.id().value();
  Result<Version> current = impl_->follower->Current();
  s.current_version = current.ok() ? *current : Version(0);
  return s;
}

Status Subscriber::ReportAttestation(const LiveAttestation& attestation) {
  if (impl_->agent == nullptr) {
    return FailedPrecondition(
        "a subscriber without a coordinator runs no agent to report an attestation to");
  }
  Result<std::vector<uint8_t>> digest = FromHex(attestation.digest);
  if (!digest.ok() || digest->size() != 16) {
    return InvalidArgument("an attestation digest is 32 hex digits, not '" +
                           EscapeControlBytes(attestation.digest) + "'");
  }
  impl_->agent->ReportAttestation(attestation.version, *digest);
  return Status::Ok();
}

Status Subscriber::SetLiveBase(const LiveAttestation& attestation) {
  if (impl_->agent == nullptr) {
    return FailedPrecondition("a subscriber without a coordinator runs no agent to keep payloads");
  }
  if (!attestation.matches || !attestation.every_tensor) {
    return FailedPrecondition(
        "the live tensors do not hold v" + std::to_string(attestation.version.value()) +
        (attestation.matches ? " whole: a tensor of the version is not registered"
                             : ": their attestation does not match the version"));
  }
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> manifest,
                      impl_->follower->ManifestOf(attestation.version));
  impl_->agent->SetLiveBase(attestation.version, manifest->root);
  return Status::Ok();
}

bool Subscriber::has_agent() const { return impl_->agent != nullptr; }
const std::filesystem::path& Subscriber::store() const { return impl_->options.store; }
const std::string& Subscriber::channel() const { return impl_->options.channel; }

std::string Subscriber::Describe(Version min_version) const {
  return impl_->follower->Describe(min_version);
}

void Subscriber::Close() {
  std::lock_guard lock(impl_->close_mu);
  impl_->closed->store(true);
  impl_->follower->Close();
  if (impl_->agent != nullptr) impl_->agent->Stop();
}

}  // namespace weightcast
