// The public LiveTensors (include/weightcast/live.h) over live::LiveSet.
#include <weightcast/live.h>

#include "format/safetensors.h"
#include "live/live_set.h"
#include "live/store_view.h"

namespace weightcast {

struct LiveTensors::Impl {
  std::unique_ptr<live::LiveSet> set;
};

LiveTensors::LiveTensors(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LiveTensors::~LiveTensors() = default;

Result<std::unique_ptr<LiveTensors>> LiveTensors::Register(std::vector<LiveTensorView> tensors) {
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
  ASSIGN_OR_RETURN(impl->set, live::LiveSet::Create(std::move(set)));
  return std::unique_ptr<LiveTensors>(new LiveTensors(std::move(impl)));
}

Result<LiveApplyReport> LiveTensors::ApplyFromStore(const std::filesystem::path& store,
                                                    std::string_view channel, Version version) {
  ASSIGN_OR_RETURN(const live::ApplyReport r,
                   live::ApplyFromStore(store, channel, version, *impl_->set));
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
  out.seconds = r.seconds;
  out.note = r.note;
  return out;
}

Version LiveTensors::version() const { return impl_->set->version(); }

}  // namespace weightcast
