// The public LiveTensors (include/weightcast/live.h) over live::LiveSet.
#include <weightcast/live.h>

#include <chrono>

#include "format/safetensors.h"
#include "live/device_memory.h"
#include "live/live_set.h"
#include "live/memory_channel.h"
#include "live/store_view.h"
#include "manifest/attestation.h"
#include "util/text.h"

namespace weightcast {

struct LiveTensors::Impl {
  std::unique_ptr<live::LiveSet> set;
};

namespace {

LiveApplyReport ToPublic(const live::ApplyReport& r) {
  LiveApplyReport out;
  out.from = r.from;
  out.to = r.to;
  out.delta = r.delta;
  out.chunks_patched = r.chunks_patched;
  out.chunks_copied = r.chunks_copied;
  out.chunks_unchanged = r.chunks_unchanged;
  out.chunks_repaired = r.chunks_repaired;
  out.payload_bytes = r.payload_bytes;
  out.copied_bytes = r.copied_bytes;
  out.caught_up = r.caught_up;
  out.check = std::string(HashAlgorithmName(r.check));
  out.seconds = r.seconds;
  out.note = r.note;
  if (r.attestation.has_value()) {
    LiveAttestation a;
    a.version = r.to;
    a.digest = ToHex(std::span<const uint8_t>(r.attestation->digest.data(), 16));
    a.matches = r.attestation->matches;
    a.every_tensor = r.attestation->every_tensor;
    out.attestation = std::move(a);
  }
  return out;
}

Result<std::vector<live::SnapshotTensor>> SnapshotTensors(const std::vector<TensorView>& tensors) {
  std::vector<live::SnapshotTensor> items;
  items.reserve(tensors.size());
  for (const TensorView& t : tensors) {
    Result<DType> dtype = ParseDType(t.dtype);
    if (!dtype.ok()) return InvalidArgument("tensor '" + t.name + "': " + dtype.status().message());
    items.push_back(live::SnapshotTensor{t.name, *dtype, t.shape, t.bytes});
  }
  return items;
}

}  // namespace

LiveTensors::LiveTensors(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LiveTensors::~LiveTensors() = default;

Result<std::unique_ptr<LiveTensors>> LiveTensors::Register(std::vector<LiveTensorView> tensors) {
  return Register(std::move(tensors), nullptr);
}

Result<std::unique_ptr<LiveTensors>> LiveTensors::Register(std::vector<LiveTensorView> tensors,
                                                           std::shared_ptr<DeviceMemory> device) {
  std::vector<live::LiveTensor> set;
  set.reserve(tensors.size());
  for (LiveTensorView& t : tensors) {
    Result<DType> dtype = ParseDType(t.dtype);
    if (!dtype.ok())
      return InvalidArgument("live tensor '" + t.name + "': " + dtype.status().message());
    if (t.data == nullptr && t.size != 0)
      return InvalidArgument("live tensor '" + t.name + "' has no memory");
    set.push_back(live::LiveTensor{std::move(t.name),
                                   *dtype,
                                   std::move(t.shape),
                                   {static_cast<uint8_t*>(t.data), static_cast<size_t>(t.size)}});
  }
  auto impl = std::make_unique<Impl>();
  std::unique_ptr<live::TensorMemory> memory =
      device == nullptr ? live::HostMemory() : live::DeviceTensorMemory(std::move(device));
  WC_ASSIGN_OR_RETURN(impl->set, live::LiveSet::Create(std::move(set), std::move(memory)));
  return std::unique_ptr<LiveTensors>(new LiveTensors(std::move(impl)));
}

Result<LiveApplyReport> LiveTensors::ApplyFromStore(const std::filesystem::path& store,
                                                    std::string_view channel, Version version,
                                                    const LiveTensors* catch_up_from) {
  const live::LiveSet* other = catch_up_from != nullptr ? catch_up_from->impl_->set.get() : nullptr;
  WC_ASSIGN_OR_RETURN(const live::ApplyReport r,
                      live::ApplyFromStore(store, channel, version, *impl_->set, other));
  return ToPublic(r);
}

Result<LiveApplyReport> LiveTensors::ApplyFromMemory(const std::filesystem::path& dir,
                                                     std::string_view channel, Version version) {
  WC_ASSIGN_OR_RETURN(const live::ApplyReport r,
                      live::ApplyFromMemory(dir, channel, version, *impl_->set));
  return ToPublic(r);
}

Version LiveTensors::version() const { return impl_->set->version(); }

Result<LiveAttestation> LiveTensors::Attest(const std::filesystem::path& store,
                                            std::string_view channel) const {
  const auto start = std::chrono::steady_clock::now();
  const Version held = impl_->set->version();
  if (held.value() == 0) return FailedPrecondition("the live tensors hold no known version");
  WC_ASSIGN_OR_RETURN(std::unique_ptr<live::OpenedVersion> opened,
                      live::OpenedVersion::Open(store, channel, held));
  WC_ASSIGN_OR_RETURN(const Digest digest, impl_->set->Attest(opened->view()));
  LiveAttestation out;
  out.version = held;
  out.digest = ToHex(std::span<const uint8_t>(digest.data(), 16));
  out.matches = digest == ExpectedAttestation(opened->manifest());
  out.every_tensor = impl_->set->RegistersEvery(opened->manifest());
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

Status LiveTensors::CopyFrom(const LiveTensors& other) {
  return impl_->set->CopyFrom(*other.impl_->set);
}

struct MemoryPublisher::Impl {
  std::unique_ptr<live::MemoryChannelWriter> writer;
};

MemoryPublisher::MemoryPublisher(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MemoryPublisher::~MemoryPublisher() = default;

Result<std::unique_ptr<MemoryPublisher>> MemoryPublisher::Open(
    const std::filesystem::path& dir, std::string channel, const MemoryPublisherOptions& options) {
  live::MemoryChannelOptions o;
  o.chunk_size = options.chunk_size;
  o.threads = options.threads;
  o.deltas = options.deltas;
  o.algorithm = options.sha256 ? HashAlgorithm::kSha256 : HashAlgorithm::kXxh3_128;
  auto impl = std::make_unique<Impl>();
  WC_ASSIGN_OR_RETURN(impl->writer, live::MemoryChannelWriter::Open(dir, std::move(channel), o));
  return std::unique_ptr<MemoryPublisher>(new MemoryPublisher(std::move(impl)));
}

Status MemoryPublisher::Reserve(const std::vector<TensorView>& tensors) {
  WC_ASSIGN_OR_RETURN(std::vector<live::SnapshotTensor> items, SnapshotTensors(tensors));
  return impl_->writer->Reserve(std::move(items));
}

Status MemoryPublisher::Snapshot(const std::vector<TensorView>& tensors,
                                 std::optional<int64_t> step) {
  WC_ASSIGN_OR_RETURN(std::vector<live::SnapshotTensor> items, SnapshotTensors(tensors));
  std::map<std::string, std::string> metadata;
  if (step.has_value()) metadata["step"] = std::to_string(*step);
  return impl_->writer->Snapshot(std::move(items), std::move(metadata));
}

Result<MemoryPublishResult> MemoryPublisher::Finish() {
  WC_ASSIGN_OR_RETURN(const live::MemoryPublished p, impl_->writer->Finish());
  MemoryPublishResult out;
  out.version = p.version;
  out.delta = p.delta;
  out.total_bytes = p.total_bytes;
  out.chunk_count = p.chunk_count;
  out.payload_bytes = p.payload_bytes;
  out.root = ToHex(p.root);
  out.snapshot_seconds = p.snapshot_seconds;
  out.encode_seconds = p.encode_seconds;
  out.publish_seconds = p.publish_seconds;
  return out;
}

Result<MemoryPublishResult> MemoryPublisher::Publish(const std::vector<TensorView>& tensors,
                                                     std::optional<int64_t> step) {
  WC_RETURN_IF_ERROR(Snapshot(tensors, step));
  return Finish();
}

Result<Version> WaitMemoryVersion(const std::filesystem::path& dir, std::string_view channel,
                                  Version min_version, std::optional<double> timeout_seconds) {
  return live::WaitMemoryChannel(dir, channel, min_version, timeout_seconds, nullptr);
}

}  // namespace weightcast
