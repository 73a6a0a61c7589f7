// weightcast diff OLD NEW -o DELTA   write a delta directory: NEW's manifest with a delta section
//                                    against OLD, and the payloads (docs/delta_format.md)
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

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

struct DiffFlags {
  std::string old_dir;
  std::string new_dir;
  std::string out;
  std::string chunk_size = "auto";
  std::string hash = "sha256";
  std::string coder = "zstd";
  int level = 1;
  uint64_t base_version = 1;
  uint64_t version = 2;
  size_t threads = 0;
};

// Closes a file descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Status RunDiff(const DiffFlags& flags) {
  if (flags.out.empty()) return InvalidArgument("give the delta directory with -o DELTA");
  if (flags.version <= flags.base_version) {
    return InvalidArgument("--version must be greater than --base-version");
  }
  BuildOptions build;
  WC_ASSIGN_OR_RETURN(build.chunk_size, ParseChunkSize(flags.chunk_size));
  WC_ASSIGN_OR_RETURN(build.algorithm, ParseHashAlgorithm(flags.hash));
  build.threads = flags.threads;
  codec::VersionCodecOptions options;
  options.threads = flags.threads;
  if (flags.coder == "zstd") {
    options.chunk.coder = codec::Coder::kZstd;
  } else if (flags.coder == "lz4") {
    options.chunk.coder = codec::Coder::kLz4;
  } else {
    return InvalidArgument("--coder must be zstd or lz4, not " + flags.coder);
  }
  if (flags.level < 1 || flags.level > 19) return InvalidArgument("--level must be 1..19");
  options.chunk.zstd_level = flags.level;

  const auto start = std::chrono::steady_clock::now();
  WC_ASSIGN_OR_RETURN(Checkpoint old_ckpt, OpenCheckpoint(flags.old_dir));
  WC_ASSIGN_OR_RETURN(Checkpoint new_ckpt, OpenCheckpoint(flags.new_dir));
  WC_ASSIGN_OR_RETURN(Manifest base,
                      BuildManifest(old_ckpt, "default", Version(flags.base_version), build));
  build.chunk_size = base.chunk_size;  // chunks cut alike pair up (auto: the base's rule)
  WC_ASSIGN_OR_RETURN(Manifest target,
                      BuildManifest(new_ckpt, "default", Version(flags.version), build));
  WC_ASSIGN_OR_RETURN(codec::SnapshotReader base_bytes,
                      codec::SnapshotReader::Open(old_ckpt.root, base, codec::ReadPattern::kWhole));
  WC_ASSIGN_OR_RETURN(
      codec::SnapshotReader target_bytes,
      codec::SnapshotReader::Open(new_ckpt.root, target, codec::ReadPattern::kWhole));

  const fs::path out(flags.out);
  std::error_code ec;
  if (fs::exists(out, ec)) return AlreadyExists(out.string() + " exists; refusing to overwrite");
  if (!fs::create_directories(out, ec) || ec) {
    return IoError("mkdir " + out.string() + ": " + ec.message());
  }
  const fs::path payload_path = out / "payloads.bin";
  Fd fd{::open(payload_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)};
  if (fd.fd < 0) return ErrnoStatus("open(" + payload_path.string() + ")", errno);
  uint64_t payload_bytes = 0;
  const auto encode_start = std::chrono::steady_clock::now();
  WC_ASSIGN_OR_RETURN(DeltaInfo info, codec::EncodeVersion(
                                          base, base_bytes, target, target_bytes,
                                          [&](ChunkIndex, std::span<const uint8_t> payload) {
                                            payload_bytes += payload.size();
                                            return WriteAll(fd.fd, payload, payload_path.string());
                                          },
                                          options));
  const double encode_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - encode_start).count();
  if (::fsync(fd.fd) != 0) return ErrnoStatus("fsync(" + payload_path.string() + ")", errno);
  uint64_t counts[3] = {0, 0, 0};
  for (const DeltaChunk& d : info.chunks) ++counts[static_cast<int>(d.encoding)];
  target.delta = std::move(info);
  const fs::path manifest_path = out / "manifest.wcm";
  WC_RETURN_IF_ERROR(WriteManifestFile(manifest_path, target));
  std::error_code size_ec;
  const uint64_t manifest_bytes = fs::file_size(manifest_path, size_ec);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const uint64_t delta_bytes = payload_bytes + manifest_bytes;
  const double ratio = delta_bytes == 0 ? 0.0
                                        : static_cast<double>(target.total_size()) /
                                              static_cast<double>(delta_bytes);
  std::cout << "diff " << flags.old_dir << " -> " << flags.new_dir << "\n"
            << "  new version   " << FormatBytes(target.total_size()) << " in "
            << target.chunk_count() << " chunks (same " << counts[1] << ", xor " << counts[2]
            << ", full " << counts[0] << ")\n"
            << "  delta         " << FormatBytes(delta_bytes) << " (payloads "
            << FormatBytes(payload_bytes) << ", manifest " << FormatBytes(manifest_bytes) << ")\n"
            << "  ratio         " << ratio << "x\n"
            << "  time          " << seconds << " s (encode " << encode_s << " s)\n"
            << "  wrote         " << out.string() << "\n";
  nlohmann::ordered_json j;
  j["command"] = "diff";
  j["new_bytes"] = target.total_size();
  j["delta_bytes"] = delta_bytes;
  j["payload_bytes"] = payload_bytes;
  j["ratio"] = ratio;
  j["seconds"] = seconds;
  j["encode_seconds"] = encode_s;
  j["chunks"] = {{"same", counts[1]}, {"xor", counts[2]}, {"full", counts[0]}};
  j["base_root"] = ToHex(base.root);
  j["root"] = ToHex(target.root);
  std::cout << j.dump() << std::endl;
  if (!std::cout) return IoError("writing to stdout failed");
  return Status::Ok();
}

void SetupDiff(CLI::App& app) {
  auto flags = std::make_shared<DiffFlags>();
  CLI::App* cmd = app.add_subcommand(
      "diff", "Write a delta directory that turns checkpoint OLD into checkpoint NEW");
  cmd->add_option("old", flags->old_dir, "Base checkpoint directory")->required();
  cmd->add_option("new", flags->new_dir, "New checkpoint directory")->required();
  cmd->add_option("-o,--out", flags->out, "Delta directory to create")->required();
  cmd->add_option("--chunk-size", flags->chunk_size,
                  "Chunk size of both: "
                  "auto (the default): about 8,192 chunks, 128KiB .. 64MiB, by the size "
                  "(docs/publish.md); or a size, 64KiB .. 256MiB")
      ->capture_default_str();
  cmd->add_option("--hash", flags->hash, "Chunk hash: sha256 or xxh3-128")->capture_default_str();
  cmd->add_option("--coder", flags->coder, "Entropy coder: zstd or lz4")->capture_default_str();
  cmd->add_option("--level", flags->level, "zstd level")->capture_default_str();
  cmd->add_option("--base-version", flags->base_version, "Version number of OLD")
      ->capture_default_str();
  cmd->add_option("--version", flags->version, "Version number of NEW")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "Threads (0: one per core)")->capture_default_str();
  cmd->callback([flags] { Finish("diff", RunDiff(*flags)); });
}

const CommandRegistration kRegistered{"diff", 60, &SetupDiff};

}  // namespace
}  // namespace weightcast::cli
