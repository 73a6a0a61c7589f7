// Reading committed versions: listing, the current link, manifests, verification, chunk reads.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "store/store_impl.h"
#include "util/file.h"

namespace weightcast::store {
namespace {

bool IsDir(const std::filesystem::path& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string Name(std::string_view channel, Version v) {
  return std::string(channel) + "/" + VersionName(v);
}

// The files a chunk touches, for error messages: "model.safetensors bytes 0..65536".
std::string DescribeChunk(const Manifest& m, ChunkIndex index) {
  std::string out;
  ForEachSegment(m.files, m.ChunkRange(index),
                 [&](size_t file, uint64_t at, uint64_t len, uint64_t) {
                   if (!out.empty()) out += ", ";
                   out += m.files[file].path + " bytes " + std::to_string(at) + ".." +
                          std::to_string(at + len);
                   return Status::Ok();
                 })
      .IgnoreError();
  return out;
}

}  // namespace

Result<std::vector<Version>> StoreImpl::CommittedLocked(const ChannelLayout& layout) const {
  WC_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(layout.versions_dir()));
  std::vector<Version> out;
  for (const std::string& name : names) {
    auto v = ParseVersionName(name);
    if (v && IsDir(layout.versions_dir() / name)) out.push_back(*v);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<Version> StoreImpl::CurrentLocked(const ChannelLayout& layout) const {
  std::filesystem::path link = layout.current_link();
  char buf[256];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf));
  if (n < 0) {
    if (errno == ENOENT) {
      return NotFound("channel " + layout.dir().filename().string() + " has no current version");
    }
    return ErrnoStatus("readlink(" + link.string() + ")", errno);
  }
  std::string_view target(buf, static_cast<size_t>(n));
  constexpr std::string_view kPrefix = "versions/";
  std::optional<Version> v;
  if (static_cast<size_t>(n) < sizeof(buf) && target.substr(0, kPrefix.size()) == kPrefix) {
    v = ParseVersionName(target.substr(kPrefix.size()));
  }
  if (!v) {
    return Corrupt(link.string() + " points at '" + std::string(target) +
                   "', not at versions/<number>");
  }
  if (!IsDir(layout.version_dir(*v))) {
    return Corrupt(link.string() + " points at " + std::string(target) + ", which is missing");
  }
  return *v;
}

Result<Manifest> StoreImpl::ManifestLocked(std::string_view channel, Version version) const {
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> manifest,
                      SharedManifestLocked(channel, version));
  return *manifest;
}

Result<std::shared_ptr<const Manifest>> StoreImpl::SharedManifestLocked(std::string_view channel,
                                                                        Version version) const {
  Key key{std::string(channel), version.value()};
  auto it = manifests_.find(key);
  if (it != manifests_.end()) return it->second;
  ChannelLayout layout = Layout(channel);
  if (!IsDir(layout.version_dir(version))) {
    return NotFound("version " + Name(channel, version) + " is not committed");
  }
  std::filesystem::path path = layout.manifest_file(version);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Corrupt("manifest of committed version " + Name(channel, version) + " is missing (" +
                   path.string() + ")");
  }
  WC_ASSIGN_OR_RETURN(Manifest manifest, ReadManifestFile(path));
  if (manifest.version != version || manifest.channel != channel) {
    return Corrupt(path.string() + ": manifest is for " + Name(manifest.channel, manifest.version));
  }
  auto shared = std::make_shared<const Manifest>(std::move(manifest));
  manifests_[key] = shared;
  return shared;
}

Result<std::shared_ptr<const PartialVersion>> StoreImpl::PartialLocked(std::string_view channel,
                                                                       Version version) const {
  Key key{std::string(channel), version.value()};
  auto it = partials_.find(key);
  if (it != partials_.end()) return it->second;
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> manifest,
                      SharedManifestLocked(channel, version));
  WC_ASSIGN_OR_RETURN(std::optional<PartialVersion> partial,
                      ReadPartialFile(Layout(channel).version_dir(version), *manifest));
  std::shared_ptr<const PartialVersion> shared;
  if (partial) shared = std::make_shared<const PartialVersion>(std::move(*partial));
  partials_[key] = shared;
  return shared;
}

Result<std::optional<PartialVersion>> StoreImpl::GetPartial(std::string_view channel,
                                                            Version version) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const PartialVersion> partial,
                      PartialLocked(channel, version));
  if (partial == nullptr) return std::optional<PartialVersion>();
  return std::optional<PartialVersion>(*partial);
}

Result<std::vector<VersionInfo>> StoreImpl::List(std::string_view channel) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  if (!IsDir(layout.dir())) return NotFound("no channel " + std::string(channel));
  WC_ASSIGN_OR_RETURN(std::vector<Version> committed, CommittedLocked(layout));
  auto current = CurrentLocked(layout);
  std::vector<VersionInfo> out;
  for (Version v : committed) {
    VersionInfo info;
    info.version = v;
    info.current = current.ok() && *current == v;
    auto manifest = ManifestLocked(channel, v);
    if (manifest.ok()) {
      info.has_manifest = true;
      info.root = manifest->root;
      info.total_size = manifest->total_size();
      info.chunk_count = manifest->chunk_count();
      auto partial = PartialLocked(channel, v);
      info.partial = !partial.ok() || *partial != nullptr;  // unreadable: never taken for whole
      info.payloads = partial.ok() && *partial != nullptr && (*partial)->payloads;
    }
    out.push_back(info);
  }
  return out;
}

Result<Version> StoreImpl::Current(std::string_view channel) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  return CurrentLocked(Layout(channel));
}

Result<Manifest> StoreImpl::GetManifest(std::string_view channel, Version version) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  return ManifestLocked(channel, version);
}

Result<Version> StoreImpl::NextVersion(std::string_view channel) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  std::lock_guard lock(mu_);
  ChannelLayout layout = Layout(channel);
  uint64_t highest = 0;
  WC_ASSIGN_OR_RETURN(std::vector<Version> committed, CommittedLocked(layout));
  if (!committed.empty()) highest = committed.back().value();
  WC_ASSIGN_OR_RETURN(std::vector<std::string> staging, ListDir(layout.staging_root()));
  for (const std::string& name : staging) {
    if (auto v = ParseVersionName(name)) highest = std::max(highest, v->value());
  }
  return Version(highest + 1);
}

Status StoreImpl::Verify(std::string_view channel, Version version) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  Manifest manifest;
  std::shared_ptr<const PartialVersion> partial;
  ChannelLayout layout = Layout(channel);
  {
    std::lock_guard lock(mu_);
    WC_ASSIGN_OR_RETURN(manifest, ManifestLocked(channel, version));
    WC_RETURN_IF_ERROR(CheckSizesLocked(layout, manifest));
    WC_ASSIGN_OR_RETURN(partial, PartialLocked(channel, version));
  }
  // Hashing runs without the store lock: a committed version's files never change under it
  // (except by GC, which Verify's caller should not race with a version it still wants).
  if (ComputeRoot(manifest) != manifest.root) {
    return Corrupt("manifest of " + Name(channel, version) + ": root does not match its content");
  }
  if (partial != nullptr) {
    // Only the chunks it holds are bytes of the version; the rest are holes.
    for (ChunkIndex c : partial->chunks) {
      auto bytes = ReadChunk(channel, version, c);
      if (!bytes.ok()) return bytes.status().WithContext("verifying " + Name(channel, version));
      if (HashBytes(manifest.hash_algorithm, *bytes) != manifest.chunk_hashes[c.value()]) {
        return Corrupt("version " + Name(channel, version) + " (partial): chunk " +
                       std::to_string(c.value()) + " (" + DescribeChunk(manifest, c) +
                       ") does not match the manifest");
      }
    }
    return Status::Ok();
  }
  auto hashes = HashChunks(layout.version_dir(version), manifest.files, manifest.chunk_size,
                           manifest.hash_algorithm);
  if (!hashes.ok()) return hashes.status().WithContext("verifying " + Name(channel, version));
  if (hashes->size() != manifest.chunk_hashes.size()) {
    return Corrupt("verifying " + Name(channel, version) + ": " + std::to_string(hashes->size()) +
                   " chunks hashed, the manifest lists " +
                   std::to_string(manifest.chunk_hashes.size()));
  }
  for (uint32_t i = 0; i < manifest.chunk_count(); ++i) {
    if ((*hashes)[i] != manifest.chunk_hashes[i]) {
      return Corrupt("version " + Name(channel, version) + ": chunk " + std::to_string(i) + " (" +
                     DescribeChunk(manifest, ChunkIndex(i)) + ") does not match the manifest");
    }
  }
  return Status::Ok();
}

std::shared_ptr<const MappedVersion> StoreImpl::CachedView(const Key& key) const {
  std::lock_guard lock(views_mu_);
  auto it = views_.find(key);
  if (it == views_.end()) return nullptr;
  std::shared_ptr<const MappedVersion> view = it->second.lock();
  if (view == nullptr) return nullptr;
  // A hit counts as a use: it moves to the newest end of the kept ones.
  auto kept = std::find_if(kept_views_.begin(), kept_views_.end(),
                           [&](const auto& entry) { return entry.first == key; });
  if (kept != kept_views_.end()) kept_views_.erase(kept);
  kept_views_.emplace_back(key, view);
  while (kept_views_.size() > options_.mapped_versions) kept_views_.pop_front();
  return view;
}

void StoreImpl::RememberView(const Key& key,
                             const std::shared_ptr<const MappedVersion>& view) const {
  std::lock_guard lock(views_mu_);
  for (auto it = views_.begin(); it != views_.end();) {
    it = it->second.expired() ? views_.erase(it) : std::next(it);
  }
  views_[key] = view;
  kept_views_.emplace_back(key, view);
  while (kept_views_.size() > options_.mapped_versions) kept_views_.pop_front();
}

void StoreImpl::ForgetView(const Key& key) {
  std::lock_guard lock(views_mu_);
  views_.erase(key);
  auto kept = std::find_if(kept_views_.begin(), kept_views_.end(),
                           [&](const auto& entry) { return entry.first == key; });
  if (kept != kept_views_.end()) kept_views_.erase(kept);
}

Result<std::shared_ptr<const MappedVersion>> StoreImpl::OpenView(std::string_view channel,
                                                                 Version version) const {
  WC_RETURN_IF_ERROR(ValidateChannelName(channel));
  const Key key{std::string(channel), version.value()};
  if (std::shared_ptr<const MappedVersion> hit = CachedView(key)) return hit;
  std::lock_guard lock(mu_);
  // Mapped meanwhile by another thread: keep one view.
  if (std::shared_ptr<const MappedVersion> hit = CachedView(key)) return hit;
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const Manifest> manifest,
                      SharedManifestLocked(channel, version));
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const PartialVersion> partial,
                      PartialLocked(channel, version));
  // Under mu_: a collection cannot remove the files between the manifest read and the mapping,
  // nor forget the version before it is cached.
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedVersion> view,
                      MappedVersion::MapCommitted(Layout(channel).version_dir(version),
                                                  std::string(channel), manifest, partial));
  RememberView(key, view);
  return view;
}

Result<std::vector<uint8_t>> StoreImpl::ReadChunk(std::string_view channel, Version version,
                                                  ChunkIndex index) const {
  WC_ASSIGN_OR_RETURN(std::shared_ptr<const MappedVersion> view, OpenView(channel, version));
  WC_ASSIGN_OR_RETURN(HeldBytes chunk, view->Chunk(index));
  return std::vector<uint8_t>(chunk.bytes.begin(), chunk.bytes.end());
}

}  // namespace weightcast::store
