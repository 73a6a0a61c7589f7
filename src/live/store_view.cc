#include "live/store_view.h"

#include "store/store.h"

namespace weightcast::live {

OpenedVersion::OpenedVersion(Manifest manifest,
                             std::vector<std::shared_ptr<const MappedFile>> files,
                             std::optional<DeltaFile> delta)
    : manifest_(std::make_shared<const Manifest>(std::move(manifest))),
      files_(std::move(files)),
      delta_(std::move(delta)) {}

OpenedVersion::OpenedVersion(std::shared_ptr<const MappedVersion> mapped,
                             std::optional<DeltaFile> delta)
    : manifest_(std::shared_ptr<const Manifest>(mapped, &mapped->manifest())),
      mapped_(std::move(mapped)),
      delta_(std::move(delta)) {}

Result<std::unique_ptr<OpenedVersion>> OpenedVersion::Open(const std::filesystem::path& store_root,
                                                           std::string_view channel,
                                                           Version version) {
  StoreOptions options;
  options.read_only = true;
  WC_ASSIGN_OR_RETURN(Store store, Store::Open(store_root, options));
  // The store's mapped view: the one read path for a version's bytes (store/mapped_version.h).
  Result<std::shared_ptr<const MappedVersion>> mapped = store.OpenView(channel, version);
  if (!mapped.ok()) {
    if (mapped.status().code() != Code::kNotFound) return mapped.status();
    return NotFound("v" + std::to_string(version.value()) + " of " + std::string(channel) +
                    " is gone from " + store_root.string() + ": " + mapped.status().message());
  }
  std::optional<DeltaFile> delta;
  if (Result<DeltaFile> d = DeltaFile::Open(store_root, (*mapped)->manifest()); d.ok()) {
    delta = std::move(*d);
  }
  return std::make_unique<OpenedVersion>(std::move(mapped).value(), std::move(delta));
}

VersionView OpenedVersion::view() const {
  VersionView v;
  v.manifest = manifest_;
  if (mapped_ != nullptr) {
    for (size_t i = 0; i < mapped_->manifest().files.size(); ++i) {
      v.files.push_back(mapped_->File(i));
    }
  }
  for (const auto& f : files_) v.files.push_back(f->bytes());
  v.delta = delta_.has_value() ? &*delta_ : nullptr;
  return v;
}

Result<ApplyReport> ApplyChain(Version version, LiveSet& live, const OpenVersionFn& open) {
  WC_ASSIGN_OR_RETURN(std::unique_ptr<OpenedVersion> target, open(version));
  // A chain: every version after the held one up to the target, each a delta onto the one
  // before it, with its delta file.
  std::vector<std::unique_ptr<OpenedVersion>> steps;
  const Version held = live.version();
  if (held.value() != 0 && held.value() + 1 < version.value() && target->has_delta()) {
    for (uint64_t v = held.value() + 1; v < version.value(); ++v) {
      Result<std::unique_ptr<OpenedVersion>> step = open(Version(v));
      if (!step.ok() || !(*step)->has_delta()) {
        steps.clear();
        break;
      }
      steps.push_back(std::move(*step));
    }
  }
  ApplyReport total;
  total.from = held;
  total.to = version;
  total.delta = true;
  auto add = [&](const ApplyReport& r) {
    total.delta = total.delta && r.delta;
    total.chunks_patched += r.chunks_patched;
    total.chunks_copied += r.chunks_copied;
    total.chunks_unchanged += r.chunks_unchanged;
    total.chunks_repaired += r.chunks_repaired;
    total.payload_bytes += r.payload_bytes;
    total.copied_bytes += r.copied_bytes;
    total.seconds += r.seconds;
    total.check = r.check;              // the last apply's, the one that verifies
    total.attestation = r.attestation;  // and what it left
    if (total.note.empty()) total.note = r.note;
  };
  for (const auto& step : steps) {
    Result<ApplyReport> r = live.Apply(step->view(), ApplyOptions{.verify = false});
    if (!r.ok()) break;  // the final Apply below copies whatever the chain left unknown
    add(*r);
  }
  WC_ASSIGN_OR_RETURN(const ApplyReport last, live.Apply(target->view()));
  add(last);
  return total;
}

Result<ApplyReport> ApplyFromStore(const std::filesystem::path& store_root,
                                   std::string_view channel, Version version, LiveSet& live,
                                   const LiveSet* catch_up_from) {
  const OpenVersionFn open = [&](Version v) { return OpenedVersion::Open(store_root, channel, v); };
  if (catch_up_from == nullptr || catch_up_from == &live) return ApplyChain(version, live, open);
  WC_ASSIGN_OR_RETURN(std::unique_ptr<OpenedVersion> target, open(version));
  if (!target->has_delta() || !catch_up_from->HoldsBaseOf(target->manifest())) {
    return ApplyChain(version, live, open);
  }
  return live.Apply(target->view(), ApplyOptions{.verify = true, .catch_up_from = catch_up_from});
}

}  // namespace weightcast::live
