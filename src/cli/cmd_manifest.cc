// weightcast manifest DIR      build a checkpoint's manifest, print its summary and root hash
// weightcast manifest show F   print a stored manifest
#include <chrono>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "format/safetensors.h"
#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

using Json = nlohmann::ordered_json;

struct BuildFlags {
  std::string dir;
  std::string chunk_size = "auto";
  std::string hash = "sha256";
  std::string channel = "default";
  uint64_t version = 1;
  size_t threads = 0;
  std::string out;
  bool json = false;
};

struct ShowFlags {
  std::string file;
  bool json = false;
  bool files = false;
  bool tensors = false;
  bool chunks = false;
};

std::string_view EncodingName(ChunkEncoding e) {
  switch (e) {
    case ChunkEncoding::kFull:
      return "full";
    case ChunkEncoding::kSame:
      return "same";
    case ChunkEncoding::kXor:
      return "xor";
  }
  return "unknown";
}

Json SummaryJson(const Manifest& m) {
  Json doc;
  doc["format_version"] = m.format_version;
  doc["channel"] = m.channel;
  doc["version"] = m.version.value();
  doc["files"] = m.files.size();
  doc["tensors"] = m.tensors.size();
  doc["total_bytes"] = m.total_size();
  doc["chunk_size"] = m.chunk_size;
  doc["chunks"] = m.chunk_count();
  doc["hash"] = HashAlgorithmName(m.hash_algorithm);
  doc["root"] = ToHex(m.root);
  return doc;
}

void PrintSummary(const Manifest& m, std::ostream& out) {
  out << "  channel      " << m.channel << "\n"
      << "  version      " << m.version.value() << "\n"
      << "  files        " << m.files.size() << "\n"
      << "  tensors      " << m.tensors.size() << "\n"
      << "  total        " << FormatBytes(m.total_size()) << " (" << m.total_size() << " bytes)\n"
      << "  chunk size   " << FormatBytes(m.chunk_size) << "\n"
      << "  chunks       " << m.chunk_count() << "\n"
      << "  hash         " << HashAlgorithmName(m.hash_algorithm) << "\n";
}

Status Flush() {
  std::cout.flush();
  if (!std::cout) return IoError("writing to stdout failed");
  return Status::Ok();
}

Status RunBuild(const BuildFlags& flags) {
  if (flags.dir.empty()) {
    return InvalidArgument(
        "give a checkpoint directory (weightcast manifest DIR) or a verb "
        "(weightcast manifest show FILE); see --help");
  }
  BuildOptions options;
  WC_ASSIGN_OR_RETURN(options.chunk_size, ParseChunkSize(flags.chunk_size));
  WC_ASSIGN_OR_RETURN(options.algorithm, ParseHashAlgorithm(flags.hash));
  options.threads = flags.threads;
  if (flags.version == 0) return InvalidArgument("--version must be 1 or more");

  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(flags.dir));
  const auto start = std::chrono::steady_clock::now();
  WC_ASSIGN_OR_RETURN(Manifest m,
                      BuildManifest(checkpoint, flags.channel, Version(flags.version), options));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double gbps = seconds > 0 ? static_cast<double>(m.total_size()) / seconds / 1e9 : 0;
  const size_t threads = options.threads != 0
                             ? options.threads
                             : std::max<size_t>(1, std::thread::hardware_concurrency());

  if (!flags.out.empty()) WC_RETURN_IF_ERROR(WriteManifestFile(flags.out, m));

  if (flags.json) {
    Json doc = SummaryJson(m);
    doc["seconds"] = seconds;
    doc["gb_per_s"] = gbps;
    doc["threads"] = threads;
    doc["source"] = checkpoint.root.string();
    if (!flags.out.empty()) doc["written_to"] = flags.out;
    std::cout << doc.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    return Flush();
  }
  std::cout << "manifest of " << EscapeControlBytes(checkpoint.root.string()) << "\n";
  PrintSummary(m, std::cout);
  char rate[96];
  std::snprintf(rate, sizeof rate, "%.3f s, %.2f GB/s on %zu threads", seconds, gbps, threads);
  std::cout << "  time         " << rate << "\n";
  if (!flags.out.empty()) std::cout << "  written to   " << EscapeControlBytes(flags.out) << "\n";
  std::cout << "root " << ToHex(m.root) << "\n";
  return Flush();
}

Status RunShow(const ShowFlags& flags) {
  WC_ASSIGN_OR_RETURN(Manifest m, ReadManifestFile(flags.file));
  std::map<std::string_view, uint64_t> encodings;
  uint64_t payload = 0;
  if (m.delta.has_value()) {
    for (const DeltaChunk& c : m.delta->chunks) {
      ++encodings[EncodingName(c.encoding)];
      payload += c.payload_size;
    }
  }
  if (flags.json) {
    Json doc = SummaryJson(m);
    doc["metadata"] = m.metadata;
    if (m.delta.has_value()) {
      doc["delta"] = {{"base_version", m.delta->base_version.value()},
                      {"base_root", ToHex(m.delta->base_root)},
                      {"payload_bytes", payload},
                      {"encodings", encodings}};
    }
    if (flags.files) {
      Json files = Json::array();
      for (const ManifestFile& f : m.files) {
        files.push_back({{"path", f.path}, {"offset", f.offset}, {"size", f.size}});
      }
      doc["file_list"] = std::move(files);
    }
    if (flags.tensors) {
      Json tensors = Json::array();
      for (const ManifestTensor& t : m.tensors) {
        tensors.push_back({{"name", t.name},
                           {"dtype", DTypeName(t.dtype)},
                           {"shape", t.shape},
                           {"file", t.file_index},
                           {"offset", t.offset},
                           {"size", t.size}});
      }
      doc["tensor_list"] = std::move(tensors);
    }
    if (flags.chunks) {
      Json chunks = Json::array();
      for (const Digest& d : m.chunk_hashes) chunks.push_back(ToHex(d));
      doc["chunk_hashes"] = std::move(chunks);
    }
    std::cout << doc.dump(-1, ' ', false, Json::error_handler_t::replace) << "\n";
    return Flush();
  }
  std::cout << "manifest " << EscapeControlBytes(flags.file) << " (format " << m.format_version
            << ")\n";
  PrintSummary(m, std::cout);
  for (const auto& [key, value] : m.metadata) {
    std::cout << "  meta         " << EscapeControlBytes(key) << " = " << EscapeControlBytes(value)
              << "\n";
  }
  if (m.delta.has_value()) {
    std::cout << "  delta from   version " << m.delta->base_version.value() << ", root "
              << ToHex(m.delta->base_root) << "\n  delta chunks";
    for (const auto& [name, n] : encodings) std::cout << " " << name << "=" << n;
    std::cout << ", payload " << FormatBytes(payload) << "\n";
  }
  if (flags.files) {
    std::cout << "files (offset, size, path):\n";
    for (const ManifestFile& f : m.files) {
      std::cout << "  " << f.offset << "  " << f.size << "  " << EscapeControlBytes(f.path) << "\n";
    }
  }
  if (flags.tensors) {
    std::cout << "tensors (offset, size, dtype, shape, file, name):\n";
    for (const ManifestTensor& t : m.tensors) {
      std::cout << "  " << t.offset << "  " << t.size << "  " << DTypeName(t.dtype) << "  "
                << FormatShape(t.shape) << "  " << t.file_index << "  "
                << EscapeControlBytes(t.name) << "\n";
    }
  }
  if (flags.chunks) {
    std::cout << "chunk hashes:\n";
    for (uint32_t i = 0; i < m.chunk_count(); ++i) {
      std::cout << "  " << i << "  " << ToHex(m.chunk_hashes[i]) << "\n";
    }
  }
  std::cout << "root " << ToHex(m.root) << "\n";
  return Flush();
}

void SetupManifest(CLI::App& app) {
  auto build = std::make_shared<BuildFlags>();
  auto show = std::make_shared<ShowFlags>();
  CLI::App* cmd = app.add_subcommand(
      "manifest",
      "Build the manifest of a checkpoint directory (files, tensors, chunk hashes, root hash), "
      "or show a stored one with `manifest show FILE`");
  cmd->add_option("dir", build->dir, "Checkpoint directory or .safetensors file");
  cmd->add_option("--chunk-size", build->chunk_size,
                  "Chunk size: "
                  "auto (the default): about 8,192 chunks, 128KiB .. 64MiB, by the size "
                  "(docs/publish.md); or a size, 64KiB .. 256MiB")
      ->capture_default_str();
  cmd->add_option("--hash", build->hash, "Chunk hash: sha256 or xxh3-128")->capture_default_str();
  cmd->add_option("--channel", build->channel, "Channel name ([A-Za-z0-9._-])")
      ->capture_default_str();
  cmd->add_option("--version", build->version, "Version number within the channel (1, 2, ...)")
      ->capture_default_str();
  cmd->add_option("--threads", build->threads, "Hashing threads (0: one per core)")
      ->capture_default_str();
  cmd->add_option("-o,--out", build->out, "Write the serialized manifest to this file");
  cmd->add_flag("--json", build->json, "Print the summary as one JSON line");

  CLI::App* s = cmd->add_subcommand("show", "Print a stored manifest file (validated on read)");
  s->add_option("file", show->file, "Manifest file written by `weightcast manifest -o`")
      ->required();
  s->add_flag("--files", show->files, "List the files with their offsets");
  s->add_flag("--tensors", show->tensors, "List the tensors with their offsets");
  s->add_flag("--chunks", show->chunks, "List the chunk hashes");
  s->add_flag("--json", show->json, "Print one JSON line");
  s->callback([show] { Finish("manifest show", RunShow(*show)); });

  cmd->callback([build, s] {
    if (s->parsed()) return;
    Finish("manifest", RunBuild(*build));
  });
}

const CommandRegistration kRegistered{"manifest", 30, &SetupManifest};

}  // namespace
}  // namespace weightcast::cli
