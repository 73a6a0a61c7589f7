// weightcast patch BASE DELTA -o OUT   rebuild the new version from BASE and a delta directory
//                                      written by `weightcast diff`, refusing a wrong base
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "codec/version_codec.h"
#include "format/safetensors.h"
#include "manifest/builder.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace fs = std::filesystem;

struct PatchFlags {
  std::string base_dir;
  std::string delta_dir;
  std::string out;
  size_t threads = 0;
};

// A relative path from a manifest must stay inside the output directory.
Status CheckRelativePath(const std::string& path) {
  if (path.empty() || path.front() == '/') return Corrupt("manifest file path '" + path + "'");
  for (const auto& part : fs::path(path)) {
    if (part == ".." || part == "." || part.empty()) {
      return Corrupt("manifest file path '" + path + "' leaves the output directory");
    }
  }
  return Status::Ok();
}

// The new version's files, created at their final sizes in a staging directory; chunks are
// written at their offsets in the flat byte space, possibly across two files.
class StagedFiles {
 public:
  ~StagedFiles() {
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }

  Status Create(const fs::path& dir, const Manifest& m) {
    files_ = &m.files;
    for (const ManifestFile& f : m.files) {
      WC_RETURN_IF_ERROR(CheckRelativePath(f.path));
      const fs::path p = dir / f.path;
      std::error_code ec;
      fs::create_directories(p.parent_path(), ec);
      if (ec) return IoError("mkdir " + p.parent_path().string() + ": " + ec.message());
      const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd < 0) return ErrnoStatus("open(" + p.string() + ")", errno);
      fds_.push_back(fd);
      if (::ftruncate(fd, static_cast<off_t>(f.size)) != 0) {
        return ErrnoStatus("ftruncate(" + p.string() + ")", errno);
      }
    }
    return Status::Ok();
  }

  Status Write(uint64_t offset, std::span<const uint8_t> bytes) {
    const auto& files = *files_;
    auto it = std::upper_bound(files.begin(), files.end(), offset,
                               [](uint64_t o, const ManifestFile& f) { return o < f.offset; });
    size_t i = static_cast<size_t>(it - files.begin()) - 1;
    while (!bytes.empty() && i < files.size()) {
      const uint64_t in_file = offset - files[i].offset;
      const uint64_t n =
          std::min<uint64_t>(files[i].size - std::min(in_file, files[i].size), bytes.size());
      uint64_t done = 0;
      while (done < n) {
        const ssize_t w =
            ::pwrite(fds_[i], bytes.data() + done, n - done, static_cast<off_t>(in_file + done));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return ErrnoStatus("pwrite(" + files[i].path + ")", errno);
        done += static_cast<uint64_t>(w);
      }
      bytes = bytes.subspan(n);
      offset += n;
      ++i;
    }
    if (!bytes.empty()) return Internal("chunk beyond the last file");
    return Status::Ok();
  }

  Status SyncAndClose() {
    for (size_t i = 0; i < fds_.size(); ++i) {
      if (::fsync(fds_[i]) != 0) return ErrnoStatus("fsync(" + (*files_)[i].path + ")", errno);
      ::close(fds_[i]);
      fds_[i] = -1;
    }
    return Status::Ok();
  }

 private:
  const std::vector<ManifestFile>* files_ = nullptr;
  std::vector<int> fds_;
};

Status Patch(const PatchFlags& flags, const fs::path& staging, uint64_t* delta_bytes_out,
             uint64_t* out_bytes) {
  const fs::path delta_dir(flags.delta_dir);
  WC_ASSIGN_OR_RETURN(Manifest target, ReadManifestFile(delta_dir / "manifest.wcm"));
  if (!target.delta.has_value()) {
    return InvalidArgument((delta_dir / "manifest.wcm").string() + " has no delta section");
  }
  const DeltaInfo& delta = *target.delta;

  // Hash the base as the delta's chunking sees it; its root must be the delta's base root.
  WC_ASSIGN_OR_RETURN(Checkpoint base_ckpt, OpenCheckpoint(flags.base_dir));
  BuildOptions build;
  build.chunk_size = target.chunk_size;
  build.algorithm = target.hash_algorithm;
  build.threads = flags.threads;
  WC_ASSIGN_OR_RETURN(Manifest base,
                      BuildManifest(base_ckpt, target.channel, delta.base_version, build));
  if (base.root != delta.base_root) {
    return FailedPrecondition(flags.base_dir + " is not the base of this delta: its root is " +
                              ToHex(base.root) + ", the delta applies to " +
                              ToHex(delta.base_root));
  }
  WC_ASSIGN_OR_RETURN(
      codec::SnapshotReader base_bytes,
      codec::SnapshotReader::Open(base_ckpt.root, base, codec::BaseReadPattern(delta)));

  const fs::path payload_path = delta_dir / "payloads.bin";
  WC_ASSIGN_OR_RETURN(MappedFile payloads, MappedFile::Open(payload_path));
  std::vector<uint64_t> offsets(delta.chunks.size());
  uint64_t total = 0;
  for (size_t i = 0; i < delta.chunks.size(); ++i) {
    offsets[i] = total;
    if (delta.chunks[i].payload_size > payloads.size() - total) {
      return Corrupt(payload_path.string() + ": shorter than the delta table says");
    }
    total += delta.chunks[i].payload_size;
  }
  if (total != payloads.size()) {
    return Corrupt(payload_path.string() + ": " + std::to_string(payloads.size()) +
                   " bytes, the delta table says " + std::to_string(total));
  }
  *delta_bytes_out = total;

  StagedFiles files;
  WC_RETURN_IF_ERROR(files.Create(staging, target));
  codec::VersionCodecOptions options;
  options.threads = flags.threads;
  WC_RETURN_IF_ERROR(codec::DecodeVersion(
      base, base_bytes, target,
      [&](ChunkIndex i) -> Result<std::span<const uint8_t>> {
        return payloads.bytes().subspan(offsets[i.value()], delta.chunks[i.value()].payload_size);
      },
      [&](ChunkIndex i, std::span<const uint8_t> bytes) {
        return files.Write(target.ChunkRange(i).offset, bytes);
      },
      options));
  WC_RETURN_IF_ERROR(files.SyncAndClose());
  *out_bytes = target.total_size();
  return Status::Ok();
}

Status RunPatch(const PatchFlags& flags) {
  const fs::path out(flags.out);
  std::error_code ec;
  if (fs::exists(out, ec)) return AlreadyExists(out.string() + " exists; refusing to overwrite");
  const fs::path staging =
      out.parent_path() / (out.filename().string() + ".partial-" + std::to_string(::getpid()));
  fs::create_directories(staging, ec);
  if (ec) return IoError("mkdir " + staging.string() + ": " + ec.message());

  const auto start = std::chrono::steady_clock::now();
  uint64_t delta_bytes = 0;
  uint64_t out_bytes = 0;
  Status s = Patch(flags, staging, &delta_bytes, &out_bytes);
  if (s.ok()) {
    fs::rename(staging, out, ec);
    if (ec) s = IoError("rename " + staging.string() + " -> " + out.string() + ": " + ec.message());
  }
  if (!s.ok()) {
    // Nothing half-done is visible: the staging directory goes, OUT was never created.
    fs::remove_all(staging, ec);
    return s;
  }
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  WC_RETURN_IF_ERROR(FsyncPath(parent));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double ratio =
      delta_bytes == 0 ? 0.0 : static_cast<double>(out_bytes) / static_cast<double>(delta_bytes);
  std::cout << "patch " << flags.base_dir << " + " << flags.delta_dir << "\n"
            << "  payloads read " << FormatBytes(delta_bytes) << "\n"
            << "  rebuilt       " << FormatBytes(out_bytes) << ", every chunk verified\n"
            << "  ratio         " << ratio << "x\n"
            << "  time          " << seconds << " s\n"
            << "  wrote         " << out.string() << "\n";
  nlohmann::ordered_json j;
  j["command"] = "patch";
  j["payload_bytes"] = delta_bytes;
  j["out_bytes"] = out_bytes;
  j["ratio"] = ratio;
  j["seconds"] = seconds;
  std::cout << j.dump() << std::endl;
  if (!std::cout) return IoError("writing to stdout failed");
  return Status::Ok();
}

void SetupPatch(CLI::App& app) {
  auto flags = std::make_shared<PatchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "patch", "Rebuild a checkpoint from its base and a delta written by `weightcast diff`");
  cmd->add_option("base", flags->base_dir, "Base checkpoint directory")->required();
  cmd->add_option("delta", flags->delta_dir, "Delta directory")->required();
  cmd->add_option("-o,--out", flags->out, "Output directory to create")->required();
  cmd->add_option("--threads", flags->threads, "Threads (0: one per core)")->capture_default_str();
  cmd->callback([flags] { Finish("patch", RunPatch(*flags)); });
}

const CommandRegistration kRegistered{"patch", 61, &SetupPatch};

}  // namespace
}  // namespace weightcast::cli
