// Applying the versions of a store on this machine into live tensors: the reader side of the
// memory path (docs/live.md). The store is read, never changed, and no lock is taken, so this
// runs beside the process that writes it (a publisher's memory store, an agent's store).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "live/delta_file.h"
#include "live/live_set.h"
#include "store/mapped_version.h"
#include "util/file.h"

namespace weightcast::live {

// A committed version of a store, opened: its manifest, its files mapped read-only (the store's
// own mapped view, store/mapped_version.h, when opened from a store) and its delta file when the
// store keeps one. The mappings stay valid after the store collects the version (it unlinks
// files, never rewrites them).
class OpenedVersion {
 public:
  // kNotFound when the channel has no such committed version (any more).
  static Result<std::unique_ptr<OpenedVersion>> Open(const std::filesystem::path& store_root,
                                                     std::string_view channel, Version version);
  // From parts a caller opened itself (a memory channel's slot mappings, which it may share
  // with later versions: the slots are rewritten in place).
  OpenedVersion(Manifest manifest, std::vector<std::shared_ptr<const MappedFile>> files,
                std::optional<DeltaFile> delta);
  // From a store's mapped view.
  OpenedVersion(std::shared_ptr<const MappedVersion> mapped, std::optional<DeltaFile> delta);

  VersionView view() const;
  const Manifest& manifest() const { return *manifest_; }
  bool has_delta() const { return delta_.has_value(); }

 private:
  std::shared_ptr<const Manifest> manifest_;
  std::vector<std::shared_ptr<const MappedFile>> files_;  // from a memory channel
  std::shared_ptr<const MappedVersion> mapped_;           // from a store (files_ then empty)
  std::optional<DeltaFile> delta_;
};

using OpenVersionFn = std::function<Result<std::unique_ptr<OpenedVersion>>(Version)>;

// Brings `live` to `version`, opening versions with `open`: when the tensors hold an older
// version and every version in between opens with a delta file, the deltas are applied one
// after another, only the last step verifying (it checks every chunk any step wrote); otherwise
// one Apply of `version` itself, which copies the chunks that differ.
Result<ApplyReport> ApplyChain(Version version, LiveSet& live, const OpenVersionFn& open);

// Brings `live` to `version` of the store's `channel`. When the tensors hold an older version
// and the store keeps every version in between with its delta file, the deltas are applied one
// after another (a flipped second buffer is two versions behind), only the last step verifying
// (it checks every chunk any step wrote); otherwise one Apply of `version` itself, which copies
// the chunks that differ. The report's `from` is the version the tensors held; counts add up.
// With `catch_up_from` (a flip's other copy) holding the base of `version`'s delta, one Apply
// takes each chunk from it and patches it (ApplyOptions::catch_up_from).
Result<ApplyReport> ApplyFromStore(const std::filesystem::path& store_root,
                                   std::string_view channel, Version version, LiveSet& live,
                                   const LiveSet* catch_up_from = nullptr);

}  // namespace weightcast::live
