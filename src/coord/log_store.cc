#include "coord/log_store.h"

#include <cstdio>
#include <system_error>

#include "coord/log_file.h"
#include "util/file.h"

namespace weightcast::coord {
namespace {

// Creates `dir` (and parents) and makes the new directory entries durable, so that a manifest
// written inside is reachable after a crash.
Status CreateDirectoryDurably(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return Status::Ok();
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("mkdir(" + dir.string() + "): " + ec.message());
  WC_RETURN_IF_ERROR(FsyncPath(dir));
  WC_RETURN_IF_ERROR(FsyncPath(dir.parent_path()));
  return FsyncPath(dir.parent_path().parent_path());
}

}  // namespace

FileLogStore::FileLogStore(std::filesystem::path state_dir) : state_dir_(std::move(state_dir)) {}
FileLogStore::~FileLogStore() = default;

Result<std::unique_ptr<FileLogStore>> FileLogStore::Open(const std::filesystem::path& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec) return IoError("mkdir(" + state_dir.string() + "): " + ec.message());
  return std::unique_ptr<FileLogStore>(new FileLogStore(state_dir));
}

std::filesystem::path FileLogStore::ManifestPath(std::string_view channel, uint64_t version) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%020llu.wcsm", static_cast<unsigned long long>(version));
  return state_dir_ / "manifests" / std::string(channel) / name;
}

Result<LogStore::Loaded> FileLogStore::Load() {
  WC_ASSIGN_OR_RETURN(LogFile::Opened opened, LogFile::Open(state_dir_ / "log"));
  log_ = std::move(opened.file);
  appended_ = opened.records.size();
  return Loaded{.records = std::move(opened.records), .torn_bytes = opened.torn_bytes};
}

Status FileLogStore::Append(uint64_t sequence, std::string_view record) {
  if (log_ == nullptr) return Internal("log store: Append before Load");
  if (sequence != appended_ + 1) {
    return Internal("log store: record " + std::to_string(sequence) + " after " +
                    std::to_string(appended_));
  }
  WC_RETURN_IF_ERROR(log_->Append(record));
  appended_ = sequence;
  return Status::Ok();
}

Status FileLogStore::PutManifest(std::string_view channel, uint64_t version,
                                 std::span<const uint8_t> signed_manifest) {
  const std::filesystem::path path = ManifestPath(channel, version);
  WC_RETURN_IF_ERROR(CreateDirectoryDurably(path.parent_path()));
  return WriteFileAtomic(path,
                         std::string_view(reinterpret_cast<const char*>(signed_manifest.data()),
                                          signed_manifest.size()));
}

Result<std::string> FileLogStore::GetManifest(std::string_view channel, uint64_t version) {
  const std::filesystem::path path = ManifestPath(channel, version);
  auto bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status().WithContext(path.string());
  return bytes;
}

}  // namespace weightcast::coord
