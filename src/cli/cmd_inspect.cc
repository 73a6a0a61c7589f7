#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "format/safetensors.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct InspectOptions {
  std::string path;
  bool json = false;
  int64_t limit = -1;  // -1: not given
};

struct DTypeTotal {
  uint64_t tensors = 0;
  uint64_t bytes = 0;
};

std::map<DType, DTypeTotal> TotalsByDType(const Checkpoint& checkpoint) {
  std::map<DType, DTypeTotal> totals;
  for (const CheckpointFile& file : checkpoint.files) {
    for (const TensorInfo& t : file.header.tensors) {
      totals[t.dtype].tensors += 1;
      totals[t.dtype].bytes += t.byte_size();
    }
  }
  return totals;
}

uint64_t TensorCount(const Checkpoint& checkpoint) {
  uint64_t count = 0;
  for (const CheckpointFile& file : checkpoint.files) count += file.header.tensors.size();
  return count;
}

// Columns on a terminal: UTF-8 continuation bytes take none. (East Asian wide characters take
// two, which this does not know; names are rarely such.)
size_t DisplayWidth(std::string_view text) {
  return static_cast<size_t>(std::count_if(text.begin(), text.end(), [](char c) {
    return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  }));
}

// Prints rows with each column padded to its widest cell; the last column is not padded.
void PrintTable(std::ostream& out, std::string_view indent,
                const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], DisplayWidth(row[i]));
  }
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - DisplayWidth(row[i]) + 2, ' ');
    }
    out << line << "\n";
  }
}

void PrintText(const Checkpoint& checkpoint, uint64_t limit, std::ostream& out) {
  for (const CheckpointFile& file : checkpoint.files) {
    if (!file.is_safetensors) {
      out << EscapeControlBytes(file.relative_path) << "  " << FormatBytes(file.size) << "\n";
      continue;
    }
    const auto& tensors = file.header.tensors;
    out << EscapeControlBytes(file.relative_path) << "  " << FormatBytes(file.size) << ", "
        << tensors.size() << (tensors.size() == 1 ? " tensor" : " tensors") << ", header "
        << FormatBytes(file.header.header_bytes) << "\n";
    if (!file.header.metadata.empty()) {
      std::string line = "  metadata:";
      for (const auto& [key, value] : file.header.metadata) {
        line += " " + EscapeControlBytes(key) + "=" + EscapeControlBytes(value);
      }
      if (line.size() > 200) line = line.substr(0, 197) + "...";
      out << line << "\n";
    }
    if (tensors.empty()) continue;
    std::vector<std::vector<std::string>> rows = {{"NAME", "DTYPE", "SHAPE", "SIZE"}};
    const size_t shown = static_cast<size_t>(std::min<uint64_t>(limit, tensors.size()));
    for (size_t i = 0; i < shown; ++i) {
      const TensorInfo& t = tensors[i];
      rows.push_back({EscapeControlBytes(t.name), std::string(DTypeName(t.dtype)),
                      FormatShape(t.shape), FormatBytes(t.byte_size())});
    }
    PrintTable(out, "  ", rows);
    if (shown < tensors.size()) {
      out << "  ... " << tensors.size() - shown
          << " more tensors not shown (--limit 0 shows all)\n";
    }
  }

  const auto totals = TotalsByDType(checkpoint);
  if (!totals.empty()) {
    out << "\n";
    std::vector<std::vector<std::string>> rows = {{"DTYPE", "TENSORS", "SIZE"}};
    for (const auto& [dtype, total] : totals) {
      rows.push_back(
          {std::string(DTypeName(dtype)), std::to_string(total.tensors), FormatBytes(total.bytes)});
    }
    PrintTable(out, "", rows);
  }
  const size_t file_count = checkpoint.files.size();
  out << "\n"
      << file_count << (file_count == 1 ? " file, " : " files, ") << TensorCount(checkpoint)
      << " tensors, " << FormatBytes(checkpoint.total_bytes()) << " (" << checkpoint.total_bytes()
      << " bytes)";
  if (!checkpoint.weight_map.empty()) {
    out << ", index lists " << checkpoint.weight_map.size() << " tensors";
  }
  out << "\n";
}

void PrintJson(const Checkpoint& checkpoint, uint64_t limit, std::ostream& out) {
  using Json = nlohmann::ordered_json;
  Json doc;
  doc["root"] = checkpoint.root.string();
  doc["file_count"] = checkpoint.files.size();
  doc["tensor_count"] = TensorCount(checkpoint);
  doc["total_bytes"] = checkpoint.total_bytes();
  Json dtypes = Json::object();
  for (const auto& [dtype, total] : TotalsByDType(checkpoint)) {
    dtypes[std::string(DTypeName(dtype))] = {{"tensors", total.tensors}, {"bytes", total.bytes}};
  }
  doc["dtypes"] = std::move(dtypes);
  doc["indexed_tensors"] = checkpoint.weight_map.size();
  Json files = Json::array();
  for (const CheckpointFile& file : checkpoint.files) {
    Json f;
    f["path"] = file.relative_path;
    f["size"] = file.size;
    f["safetensors"] = file.is_safetensors;
    if (file.is_safetensors) {
      const auto& tensors = file.header.tensors;
      f["header_bytes"] = file.header.header_bytes;
      f["data_offset"] = file.header.data_offset();
      f["metadata"] = file.header.metadata;
      f["tensor_count"] = tensors.size();
      Json rows = Json::array();
      const size_t shown = static_cast<size_t>(std::min<uint64_t>(limit, tensors.size()));
      for (size_t i = 0; i < shown; ++i) {
        const TensorInfo& t = tensors[i];
        rows.push_back({{"name", t.name},
                        {"dtype", DTypeName(t.dtype)},
                        {"shape", t.shape},
                        {"begin", t.begin},
                        {"end", t.end},
                        {"size", t.byte_size()}});
      }
      f["tensors"] = std::move(rows);
      f["tensors_elided"] = tensors.size() - shown;
    }
    files.push_back(std::move(f));
  }
  doc["files"] = std::move(files);
  // Names are validated UTF-8; the root path given on the command line may not be.
  out << doc.dump(2, ' ', false, Json::error_handler_t::replace) << "\n";
}

Status RunInspect(const InspectOptions& options) {
  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(options.path));
  constexpr uint64_t kUnlimited = std::numeric_limits<uint64_t>::max();
  constexpr uint64_t kDefaultTextLimit = 50;
  uint64_t limit = options.json ? kUnlimited : kDefaultTextLimit;
  if (options.limit == 0) limit = kUnlimited;
  if (options.limit > 0) limit = static_cast<uint64_t>(options.limit);
  if (options.json) {
    PrintJson(checkpoint, limit, std::cout);
  } else {
    PrintText(checkpoint, limit, std::cout);
  }
  std::cout.flush();
  if (!std::cout) return IoError("writing to stdout failed");
  return Status::Ok();
}

void SetupInspect(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "Validate a checkpoint (directory or .safetensors file) and list its files and tensors");
  cmd->add_option("path", options->path, "Checkpoint directory or .safetensors file")->required();
  cmd->add_flag("--json", options->json, "Print one JSON document instead of tables");
  cmd->add_option("--limit", options->limit,
                  "Tensors listed per file (default 50 for tables, all for --json; 0 = all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->callback([options] { Finish("inspect", RunInspect(*options)); });
}

const CommandRegistration kRegistered{"inspect", 20, &SetupInspect};

}  // namespace
}  // namespace weightcast::cli
