#include "store/mapped_version.h"

#include <sys/mman.h>

#include <cstring>

#include "store/layout.h"
#include "store/staging.h"

namespace weightcast {
namespace {

std::string Name(std::string_view channel, Version v) {
  return std::string(channel) + "/" + store::VersionName(v);
}

// MappedFile asks for sequential readahead, which also lets the kernel drop pages soon after
// they are read. A served version is read once per peer: keep its pages like any other.
void ReadAsNormal(const MappedFile& file) {
  if (file.size() == 0) return;
  ::madvise(const_cast<uint8_t*>(file.bytes().data()), file.size(), MADV_NORMAL);
}

Status CheckSize(const MappedFile& file, const ManifestFile& f) {
  if (file.size() != f.size) {
    return Corrupt(file.path().string() + ": " + std::to_string(file.size()) +
                   " bytes, the manifest says " + std::to_string(f.size));
  }
  return Status::Ok();
}

}  // namespace

MappedVersion::MappedVersion(std::string channel, std::shared_ptr<const Manifest> manifest,
                             std::shared_ptr<const PartialVersion> partial,
                             std::weak_ptr<const store::StagingState> staging_state,
                             std::vector<MappedFile> files)
    : channel_(std::move(channel)),
      manifest_(std::move(manifest)),
      partial_(std::move(partial)),
      staging_(!staging_state.expired()),
      staging_state_(std::move(staging_state)),
      files_(std::move(files)) {}

MappedVersion::~MappedVersion() = default;

Result<std::shared_ptr<const MappedVersion>> MappedVersion::MapCommitted(
    const std::filesystem::path& dir, std::string channel, std::shared_ptr<const Manifest> manifest,
    std::shared_ptr<const PartialVersion> partial) {
  std::vector<MappedFile> files;
  files.reserve(manifest->files.size());
  for (const ManifestFile& f : manifest->files) {
    WC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(dir / f.path));
    WC_RETURN_IF_ERROR(CheckSize(file, f));
    ReadAsNormal(file);
    files.push_back(std::move(file));
  }
  // Not make_shared: the constructor is private.
  return std::shared_ptr<const MappedVersion>(new MappedVersion(
      std::move(channel), std::move(manifest), std::move(partial), {}, std::move(files)));
}

Result<std::shared_ptr<const MappedVersion>> MappedVersion::MapStaging(
    const std::shared_ptr<const store::StagingState>& state) {
  const Manifest& m = state->manifest;
  std::vector<MappedFile> files;
  files.reserve(m.files.size());
  for (size_t i = 0; i < m.files.size(); ++i) {
    WC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Map(state->fds[i], m.files[i].path));
    WC_RETURN_IF_ERROR(CheckSize(file, m.files[i]));
    ReadAsNormal(file);
    files.push_back(std::move(file));
  }
  // One copy of the manifest per staging: aliasing the state's own would hold the state
  // strongly, and the state holds its view.
  return std::shared_ptr<const MappedVersion>(
      new MappedVersion(state->channel, std::make_shared<const Manifest>(m), nullptr,
                        std::weak_ptr<const store::StagingState>(state), std::move(files)));
}

Status MappedVersion::CheckHeld(ChunkIndex index) const {
  if (index.value() >= manifest_->chunk_count()) {
    return OutOfRange("chunk " + std::to_string(index.value()) + " is beyond the " +
                      std::to_string(manifest_->chunk_count()) + " chunks of " +
                      Name(channel_, version()));
  }
  if (partial_ != nullptr && !partial_->HoldsChunk(index)) {
    return NotFound("chunk " + std::to_string(index.value()) + " of " + Name(channel_, version()) +
                    " is not held: the version is partial (a tensor-subset agent's)");
  }
  if (staging_) {
    const std::shared_ptr<const store::StagingState> state = staging_state_.lock();
    if (state == nullptr) {
      return FailedPrecondition("staging version " + Name(channel_, version()) +
                                " has no handle left; its verified chunks are unknown");
    }
    if (!state->HasChunk(index)) {
      return NotFound("chunk " + std::to_string(index.value()) + " of staging version " +
                      Name(channel_, version()) + " is not verified yet");
    }
  }
  return Status::Ok();
}

bool MappedVersion::Holds(ChunkIndex index) const { return CheckHeld(index).ok(); }

Result<HeldBytes> MappedVersion::Chunk(ChunkIndex index) const {
  WC_RETURN_IF_ERROR(CheckHeld(index));
  const ByteRange range = manifest_->ChunkRange(index);
  const size_t first = store::FirstFileAt(manifest_->files, range.offset);
  if (first < files_.size()) {
    const ManifestFile& f = manifest_->files[first];
    if (range.end() <= f.offset + f.size) {
      // Invariant: the file's mapping is exactly f.size bytes (checked when mapped).
      return HeldBytes{files_[first].bytes().subspan(range.offset - f.offset, range.size),
                       shared_from_this()};
    }
  }
  // Spans files: gathered. A chunk per file boundary at most, so rare for large chunks.
  std::shared_ptr<uint8_t[]> buffer = std::make_shared_for_overwrite<uint8_t[]>(range.size);
  WC_RETURN_IF_ERROR(store::ForEachSegment(
      manifest_->files, range, [&](size_t file, uint64_t at, uint64_t len, uint64_t to) {
        std::memcpy(buffer.get() + to, files_[file].bytes().data() + at, len);
        return Status::Ok();
      }));
  gathered_bytes_.fetch_add(range.size, std::memory_order_relaxed);
  const std::span<const uint8_t> bytes(buffer.get(), range.size);
  return HeldBytes{bytes, std::move(buffer)};
}

}  // namespace weightcast
