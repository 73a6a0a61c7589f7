// safetensors files and checkpoint directories.
//
// A safetensors file: 8-byte little-endian header length N, N bytes of JSON header, then the data
// section. The header maps tensor names to {dtype, shape, data_offsets: [begin, end)} relative to
// the start of the data section, plus an optional "__metadata__" of string -> string.
// Everything read from a file is validated before use; errors name the file and the problem.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <weightcast/status.h>

namespace weightcast {

enum class DType : uint8_t {
  kBool,
  kU8,
  kI8,
  kU16,
  kI16,
  kU32,
  kI32,
  kU64,
  kI64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kF8_E4M3,
  kF8_E5M2,
  kF8_E8M0,
  kF6_E2M3,
  kF6_E3M2,
  kF4,
};

std::string_view DTypeName(DType dtype);          // as spelled in safetensors: "BF16", "F8_E4M3"
Result<DType> ParseDType(std::string_view name);  // kInvalidArgument for unknown names
uint32_t DTypeBits(DType dtype);                  // 1 for BOOL is stored as 8; F4 is 4, F6 is 6

// Byte size of a tensor, checking for overflow in the shape product and that sub-byte dtypes
// fill whole bytes.
Result<uint64_t> TensorByteSize(DType dtype, std::span<const uint64_t> shape);

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // data_offsets[0], relative to the data section
  uint64_t end = 0;    // data_offsets[1]
  uint64_t byte_size() const { return end - begin; }
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;        // N
  std::vector<TensorInfo> tensors;  // sorted by begin
  std::map<std::string, std::string> metadata;
  // Absolute file offset of the data section.
  uint64_t data_offset() const { return 8 + header_bytes; }
};

// Validates `file_prefix` (at least the first 8 + N bytes of the file; more is fine) as the start
// of a safetensors file of `file_size` bytes. `file_name` only labels errors. Never reads outside
// `file_prefix`. Rejects: N beyond the file or over kMaxSafetensorsHeaderBytes, invalid JSON or
// UTF-8, unknown dtypes, shapes that disagree with their offsets or overflow, overlapping,
// unordered, out-of-range or gapped offsets, data that does not reach exactly to file_size,
// duplicate names, non-string metadata values.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_prefix,
                                                 uint64_t file_size, std::string_view file_name);

// Reads and validates the header of a file without reading its data.
Result<SafetensorsHeader> ReadSafetensorsHeader(const std::filesystem::path& path);

// What the writer is told up front about each tensor.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<uint64_t> shape;
};

// Streams a safetensors file to disk in bounded memory: the header is written first (tensors
// laid out in the given order, 8-byte aligned data), then the data of each tensor in that order
// through Append. Not thread-safe. Finish() checks every byte was written and fsyncs.
// The header of a safetensors file laying out `tensors` in the given order: the 8-byte length,
// the JSON, then spaces so the data section starts at a multiple of 8 (readers may then map
// tensors of 8-byte types in place). kInvalidArgument for empty, duplicate or reserved names.
struct EncodedHeader {
  std::string bytes;        // length prefix + padded JSON
  uint64_t data_bytes = 0;  // size of the data section it declares
};
Result<EncodedHeader> EncodeSafetensorsHeader(const std::vector<TensorSpec>& tensors,
                                              const std::map<std::string, std::string>& metadata);

class SafetensorsWriter {
 public:
  static Result<std::unique_ptr<SafetensorsWriter>> Create(
      const std::filesystem::path& path, std::vector<TensorSpec> tensors,
      const std::map<std::string, std::string>& metadata = {});
  virtual ~SafetensorsWriter() = default;
  // Appends bytes of the tensor data in layout order; may cross tensor boundaries.
  virtual Status Append(std::span<const uint8_t> bytes) = 0;
  virtual Status Finish() = 0;
};

// One file of a checkpoint directory. Non-safetensors files (config.json, tokenizer files) are
// carried as opaque bytes so a committed version is a directory an engine can load as is.
struct CheckpointFile {
  std::string relative_path;  // '/'-separated, no "..", no leading '/'
  uint64_t size = 0;
  bool is_safetensors = false;
  SafetensorsHeader header;  // valid when is_safetensors
};

struct Checkpoint {
  std::filesystem::path root;         // the directory (or the parent of a single file)
  std::vector<CheckpointFile> files;  // sorted by relative_path
  // From model.safetensors.index.json when present: tensor name -> file. Validated against the
  // headers (every entry names a file that holds that tensor, and every tensor is listed).
  std::map<std::string, std::string> weight_map;
  uint64_t total_bytes() const;
  // Whether any safetensors file holds a tensor (a publisher refuses a version without one).
  bool has_tensors() const;
};

// The weight_map of a *.safetensors.index.json: tensor name -> the file that holds it, relative
// to the index's directory. Strict (valid UTF-8, no duplicate keys, bounded depth and size);
// `label` names the index in errors. No file is checked to exist.
Result<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view text,
                                                                 std::string_view label);
// The distinct files a weight_map names, sorted.
std::vector<std::string> IndexShards(const std::map<std::string, std::string>& weight_map);

// Returns the text of an index file of a checkpoint (at most kMaxSafetensorsHeaderBytes).
using IndexReader = std::function<Result<std::string>(const CheckpointFile&)>;

// A checkpoint from files described without a local directory (an HTTP origin, where the
// headers were fetched): sorts `files`, then makes the checks OpenCheckpoint makes (unique tensor
// names, every index against the headers, read through `read_index`). `root` labels errors.
Result<Checkpoint> AssembleCheckpoint(std::filesystem::path root, std::vector<CheckpointFile> files,
                                      const IndexReader& read_index);

// Opens a checkpoint: a directory (every regular file below it, recursively) or one
// .safetensors file. Validates every safetensors header and the index if present.
Result<Checkpoint> OpenCheckpoint(const std::filesystem::path& path);

}  // namespace weightcast
