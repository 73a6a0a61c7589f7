#include <algorithm>
#include <string>
#include <system_error>
#include <utility>

#include "format/safetensors.h"
#include "format/strict_json.h"
#include "util/file.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using format_internal::QuoteForError;

constexpr std::string_view kSafetensorsSuffix = ".safetensors";
constexpr std::string_view kIndexSuffix = ".safetensors.index.json";
// An index holds a map and free-form metadata; real ones are two or three levels deep.
constexpr int kIndexMaxDepth = 32;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string ParentDir(std::string_view relative_path) {
  const size_t slash = relative_path.rfind('/');
  return slash == std::string_view::npos ? std::string()
                                         : std::string(relative_path.substr(0, slash));
}

std::string JoinRelative(const std::string& dir, std::string_view name) {
  return dir.empty() ? std::string(name) : dir + "/" + std::string(name);
}

Status ErrorCodeStatus(const fs::path& path, std::string_view what, const std::error_code& ec) {
  if (ec == std::errc::no_such_file_or_directory) {
    return NotFound(path.string() + ": " + std::string(what) + ": " + ec.message());
  }
  return IoError(path.string() + ": " + std::string(what) + ": " + ec.message());
}

// True when `target` (canonical) is `root` (canonical) or below it.
bool IsInside(const fs::path& target, const fs::path& root) {
  const fs::path rel = target.lexically_relative(root);
  if (rel.empty()) return false;
  const auto first = rel.begin();
  return first == rel.end() || *first != "..";
}

Result<CheckpointFile> DescribeFile(const fs::path& full_path, std::string relative_path) {
  if (auto bad = format_internal::FirstInvalidUtf8(relative_path)) {
    return InvalidArgument(full_path.string() +
                           ": file name is not valid UTF-8 (manifests store names as UTF-8)");
  }
  CheckpointFile file;
  file.relative_path = std::move(relative_path);
  file.is_safetensors = EndsWith(file.relative_path, kSafetensorsSuffix);
  if (file.is_safetensors) {
    WC_ASSIGN_OR_RETURN(file.header, ReadSafetensorsHeader(full_path));
    // The header was validated against the file size it saw, so the size follows from it.
    file.size = file.header.data_offset() +
                (file.header.tensors.empty() ? 0 : file.header.tensors.back().end);
  } else {
    std::error_code ec;
    const uintmax_t size = fs::file_size(full_path, ec);
    if (ec) return ErrorCodeStatus(full_path, "size", ec);
    file.size = size;
  }
  return file;
}

// Lists every regular file below `root`, refusing anything that would make the checkpoint differ
// from what a reader of the directory sees: links leaving it, links to directories (a cycle or a
// second copy), dangling links, devices, sockets, fifos, unreadable subdirectories.
Result<std::vector<std::pair<fs::path, std::string>>> ListFiles(const fs::path& root) {
  std::error_code ec;
  const fs::path canonical_root = fs::canonical(root, ec);
  if (ec) return ErrorCodeStatus(root, "resolve", ec);
  std::vector<std::pair<fs::path, std::string>> out;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec);
  if (ec) return ErrorCodeStatus(root, "list", ec);
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string relative = p.lexically_relative(root).generic_string();
    const fs::file_status link_status = it->symlink_status(ec);
    if (ec) return ErrorCodeStatus(p, "stat", ec);
    if (fs::is_symlink(link_status)) {
      const fs::path target = fs::canonical(p, ec);
      if (ec) return InvalidArgument(p.string() + ": symlink does not resolve: " + ec.message());
      if (!IsInside(target, canonical_root)) {
        return InvalidArgument(p.string() + ": symlink points outside the checkpoint (to " +
                               target.string() + ")");
      }
      const fs::file_status target_status = fs::status(target, ec);
      if (ec) return ErrorCodeStatus(target, "stat", ec);
      if (fs::is_directory(target_status)) {
        return InvalidArgument(p.string() + ": symlink to a directory is not supported");
      }
      if (!fs::is_regular_file(target_status)) {
        return InvalidArgument(p.string() + ": symlink to something other than a regular file");
      }
      out.emplace_back(p, relative);
    } else if (fs::is_directory(link_status)) {
      continue;  // the iterator descends into it
    } else if (fs::is_regular_file(link_status)) {
      out.emplace_back(p, relative);
    } else {
      return InvalidArgument(p.string() +
                             ": not a regular file (device, socket or fifo); a checkpoint holds "
                             "only regular files");
    }
  }
  // increment() ends the loop on error (a subdirectory that cannot be read) and leaves ec set.
  if (ec) return ErrorCodeStatus(root, "list", ec);
  return out;
}

// Checks one *.safetensors.index.json (its text from `read_index`) and adds its entries to
// `weight_map` (tensor -> relative path). `where` maps every tensor of the checkpoint to the file
// that holds it.
Status ApplyIndex(const fs::path& root, const CheckpointFile& index_file,
                  const IndexReader& read_index,
                  const std::map<std::string, const CheckpointFile*>& files_by_path,
                  const std::map<std::string, std::string>& where,
                  std::map<std::string, std::string>& weight_map) {
  const std::string label = (root / index_file.relative_path).string();
  WC_ASSIGN_OR_RETURN(std::string text, read_index(index_file));
  WC_ASSIGN_OR_RETURN(auto entries, ParseSafetensorsIndex(text, label));
  const std::string dir = ParentDir(index_file.relative_path);
  for (const auto& [tensor, target] : entries) {
    const std::string what = label + ": weight_map entry for tensor " + QuoteForError(tensor);
    const fs::path normal = fs::path(JoinRelative(dir, target)).lexically_normal();
    const std::string relative = normal.generic_string();
    if (target.empty() || fs::path(target).is_absolute() || relative.empty() ||
        relative.starts_with("..")) {
      return Corrupt(what + " names " + QuoteForError(target) +
                     ", which is not a file inside the checkpoint");
    }
    const auto file_it = files_by_path.find(relative);
    if (file_it == files_by_path.end()) {
      return Corrupt(what + " names " + QuoteForError(target) + ", which does not exist");
    }
    if (!file_it->second->is_safetensors) {
      return Corrupt(what + " names " + QuoteForError(target) +
                     ", which is not a .safetensors file");
    }
    const auto where_it = where.find(tensor);
    if (where_it == where.end() || where_it->second != relative) {
      return Corrupt(what + " names " + QuoteForError(target) + ", which does not hold it" +
                     (where_it == where.end() ? std::string(" (no file does)")
                                              : " (it is in " + where_it->second + ")"));
    }
    if (!weight_map.emplace(tensor, relative).second) {
      return Corrupt(what + ": the tensor is listed by another index too");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view text,
                                                                 std::string_view label) {
  const std::string where(label);
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    return Corrupt(where + ": larger than " + std::to_string(kMaxSafetensorsHeaderBytes) +
                   " bytes");
  }
  if (auto bad = format_internal::FirstInvalidUtf8(text)) {
    return Corrupt(where + ": not valid UTF-8 (ill-formed byte at offset " + std::to_string(*bad) +
                   ")");
  }
  Result<nlohmann::json> root_json = format_internal::ParseStrictJson(text, kIndexMaxDepth);
  if (!root_json.ok()) return root_json.status().WithContext(where);
  if (!root_json->is_object()) return Corrupt(where + ": expected a JSON object");
  const auto map_it = root_json->find("weight_map");
  if (map_it == root_json->end()) return Corrupt(where + ": no \"weight_map\"");
  if (!map_it->is_object()) return Corrupt(where + ": \"weight_map\" is not an object");
  std::map<std::string, std::string> entries;
  for (const auto& [tensor, value] : map_it->items()) {
    const std::string what = where + ": weight_map entry for tensor " + QuoteForError(tensor);
    if (!value.is_string()) return Corrupt(what + " is not a string");
    const auto& target = value.get_ref<const std::string&>();
    entries.emplace(tensor, target);
  }
  return entries;
}

std::vector<std::string> IndexShards(const std::map<std::string, std::string>& weight_map) {
  std::vector<std::string> shards;
  for (const auto& [tensor, file] : weight_map) shards.push_back(file);
  std::sort(shards.begin(), shards.end());
  shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
  return shards;
}

Result<Checkpoint> AssembleCheckpoint(fs::path root, std::vector<CheckpointFile> files,
                                      const IndexReader& read_index) {
  Checkpoint checkpoint;
  checkpoint.root = std::move(root);
  std::sort(files.begin(), files.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return a.relative_path < b.relative_path;
  });
  checkpoint.files = std::move(files);

  // Tensor names are unique across the whole checkpoint: the manifest and the index key on them.
  std::map<std::string, std::string> where;
  std::map<std::string, const CheckpointFile*> files_by_path;
  for (const CheckpointFile& file : checkpoint.files) {
    files_by_path.emplace(file.relative_path, &file);
    if (!file.is_safetensors) continue;
    for (const TensorInfo& tensor : file.header.tensors) {
      auto [it, inserted] = where.emplace(tensor.name, file.relative_path);
      if (!inserted) {
        return Corrupt((checkpoint.root / file.relative_path).string() + ": tensor " +
                       QuoteForError(tensor.name) + " is also in " + it->second +
                       " (tensor names must be unique across the checkpoint)");
      }
    }
  }

  std::map<std::string, std::string> index_for_dir;  // dir -> one index there, for messages
  for (const CheckpointFile& file : checkpoint.files) {
    if (!EndsWith(file.relative_path, kIndexSuffix)) continue;
    WC_RETURN_IF_ERROR(
        ApplyIndex(checkpoint.root, file, read_index, files_by_path, where, checkpoint.weight_map));
    index_for_dir.emplace(ParentDir(file.relative_path), file.relative_path);
  }
  // Where a directory has an index, every tensor of its shards must be listed: a shard the index
  // does not know about is usually left over from an earlier save, and loaders would ignore it.
  for (const CheckpointFile& file : checkpoint.files) {
    if (!file.is_safetensors) continue;
    const auto index_it = index_for_dir.find(ParentDir(file.relative_path));
    if (index_it == index_for_dir.end()) continue;
    for (const TensorInfo& tensor : file.header.tensors) {
      if (!checkpoint.weight_map.contains(tensor.name)) {
        return Corrupt((checkpoint.root / file.relative_path).string() + ": tensor " +
                       QuoteForError(tensor.name) + " is not in the weight_map of " +
                       index_it->second);
      }
    }
  }
  return checkpoint;
}

bool Checkpoint::has_tensors() const {
  for (const CheckpointFile& f : files) {
    if (f.is_safetensors && !f.header.tensors.empty()) return true;
  }
  return false;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t total = 0;
  for (const CheckpointFile& file : files) total += file.size;
  return total;
}

Result<Checkpoint> OpenCheckpoint(const fs::path& path) {
  // The root is the directory, or the file's parent; indexes are read from it.
  auto read_index_below = [](fs::path root) -> IndexReader {
    return [root = std::move(root)](const CheckpointFile& file) {
      return ReadFileToString(root / file.relative_path, kMaxSafetensorsHeaderBytes);
    };
  };
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (ec) return ErrorCodeStatus(path, "open checkpoint", ec);

  if (fs::is_regular_file(status)) {
    const std::string name = path.filename().string();
    if (!EndsWith(name, kSafetensorsSuffix)) {
      return InvalidArgument(path.string() +
                             ": not a directory or a .safetensors file; pass the checkpoint "
                             "directory to include other files");
    }
    WC_ASSIGN_OR_RETURN(CheckpointFile file, DescribeFile(path, name));
    fs::path root = path.parent_path();
    if (root.empty()) root = ".";
    std::vector<CheckpointFile> files;
    files.push_back(std::move(file));
    IndexReader read_index = read_index_below(root);
    return AssembleCheckpoint(std::move(root), std::move(files), read_index);
  }
  if (!fs::is_directory(status)) {
    return InvalidArgument(path.string() + ": not a directory or a .safetensors file");
  }

  WC_ASSIGN_OR_RETURN(auto listed, ListFiles(path));
  if (listed.empty()) return InvalidArgument(path.string() + ": the directory holds no files");
  std::vector<CheckpointFile> files;
  files.reserve(listed.size());
  for (auto& [full, relative] : listed) {
    WC_ASSIGN_OR_RETURN(CheckpointFile file, DescribeFile(full, std::move(relative)));
    files.push_back(std::move(file));
  }
  return AssembleCheckpoint(path, std::move(files), read_index_below(path));
}

}  // namespace weightcast
