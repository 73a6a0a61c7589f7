#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <tuple>

#include "format/safetensors.h"
#include "format/strict_json.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast {
namespace {

using format_internal::QuoteForError;
using Json = nlohmann::json;

// Root object -> tensor entry object -> shape array. Anything deeper is not a safetensors header.
constexpr int kHeaderMaxDepth = 3;
constexpr std::string_view kMetadataKey = "__metadata__";

uint64_t LoadLittleEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string RangeString(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

std::string_view JsonTypeName(const Json& value) {
  if (value.is_number_unsigned()) return "a non-negative integer";
  if (value.is_number_integer()) return "a negative integer";
  if (value.is_number_float()) return "a non-integer number";
  return value.type_name();
}

// Reads an array of non-negative integers that fit in 64 bits.
Result<std::vector<uint64_t>> ReadUnsignedArray(const Json& value, std::string_view what) {
  if (!value.is_array()) {
    return Corrupt(std::string(what) + " is " + std::string(JsonTypeName(value)) +
                   ", expected an array of non-negative integers");
  }
  std::vector<uint64_t> out;
  out.reserve(value.size());
  for (const Json& item : value) {
    if (!item.is_number_unsigned()) {
      // nlohmann stores integers above 2^64-1 as floats, so they land here too.
      return Corrupt(std::string(what) + " holds " + std::string(JsonTypeName(item)) +
                     ", expected non-negative integers below 2^64");
    }
    out.push_back(item.get<uint64_t>());
  }
  return out;
}

Result<TensorInfo> ReadTensorEntry(const std::string& name, const Json& entry) {
  const std::string label = "tensor " + QuoteForError(name);
  auto fail = [&](const std::string& problem) { return Corrupt(label + ": " + problem); };
  if (!entry.is_object()) {
    return fail("entry is " + std::string(JsonTypeName(entry)) + ", expected an object");
  }
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return fail("unknown field " + QuoteForError(key) +
                  " (a tensor has only dtype, shape and data_offsets)");
    }
  }
  for (const char* required : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(required)) return fail(std::string("missing field \"") + required + "\"");
  }

  TensorInfo info;
  info.name = name;
  const Json& dtype = entry["dtype"];
  if (!dtype.is_string()) {
    return fail("dtype is " + std::string(JsonTypeName(dtype)) + ", expected a string");
  }
  const auto& dtype_name = dtype.get_ref<const std::string&>();
  Result<DType> parsed_dtype = ParseDType(dtype_name);
  if (!parsed_dtype.ok()) return fail("unknown dtype " + QuoteForError(dtype_name));
  info.dtype = *parsed_dtype;

  Result<std::vector<uint64_t>> shape = ReadUnsignedArray(entry["shape"], "shape");
  if (!shape.ok()) return fail(shape.status().message());
  info.shape = std::move(*shape);

  Result<std::vector<uint64_t>> offsets = ReadUnsignedArray(entry["data_offsets"], "data_offsets");
  if (!offsets.ok()) return fail(offsets.status().message());
  if (offsets->size() != 2) {
    return fail("data_offsets has " + std::to_string(offsets->size()) +
                " values, expected [begin, end]");
  }
  info.begin = (*offsets)[0];
  info.end = (*offsets)[1];
  if (info.end < info.begin) {
    return fail("data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                "] end before they begin");
  }

  Result<uint64_t> size = TensorByteSize(info.dtype, info.shape);
  if (!size.ok()) {
    return fail("shape " + FormatShape(info.shape) + " of " + std::string(DTypeName(info.dtype)) +
                ": " + size.status().message());
  }
  if (*size != info.byte_size()) {
    return fail("shape " + FormatShape(info.shape) + " of " + std::string(DTypeName(info.dtype)) +
                " is " + std::to_string(*size) + " bytes but data_offsets " +
                RangeString(info.begin, info.end) + " hold " + std::to_string(info.byte_size()));
  }
  return info;
}

Status ReadMetadata(const Json& value, std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) {
    return Corrupt("__metadata__ is " + std::string(JsonTypeName(value)) +
                   ", expected an object of strings");
  }
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return Corrupt("__metadata__ value for " + QuoteForError(key) + " is " +
                     std::string(JsonTypeName(item)) + ", expected a string");
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return Status::Ok();
}

// Invariant on success: sorted by begin, the tensors tile [0, data_size) exactly.
Status CheckLayout(std::vector<TensorInfo>& tensors, uint64_t data_size) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : tensors) {
    if (t.begin < covered) {
      return Corrupt("tensor " + QuoteForError(t.name) + " at " + RangeString(t.begin, t.end) +
                     " overlaps tensor " + QuoteForError(previous->name) + " at " +
                     RangeString(previous->begin, previous->end));
    }
    if (t.begin > covered) {
      return Corrupt("bytes " + RangeString(covered, t.begin) +
                     " of the data section belong to no tensor (gap before tensor " +
                     QuoteForError(t.name) + ")");
    }
    if (t.end > data_size) {
      return Corrupt("tensor " + QuoteForError(t.name) + " at " + RangeString(t.begin, t.end) +
                     " runs past the end of the data section (" + std::to_string(data_size) +
                     " bytes): the file is truncated or the offsets are wrong");
    }
    covered = t.end;
    previous = &t;
  }
  if (covered != data_size) {
    return Corrupt("the data section is " + std::to_string(data_size) +
                   " bytes but the tensors cover only " + std::to_string(covered) +
                   " (trailing bytes after the last tensor)");
  }
  return Status::Ok();
}

Result<SafetensorsHeader> ParseChecked(std::span<const uint8_t> file_prefix, uint64_t file_size) {
  if (file_size < 8) {
    return Corrupt("file is " + std::to_string(file_size) +
                   " bytes, too short for the 8-byte header length");
  }
  if (file_prefix.size() < 8) {
    return Corrupt("only " + std::to_string(file_prefix.size()) +
                   " bytes of the file are available, fewer than the 8-byte header length");
  }
  SafetensorsHeader header;
  header.header_bytes = LoadLittleEndian64(file_prefix.data());
  const uint64_t n = header.header_bytes;
  if (n > kMaxSafetensorsHeaderBytes) {
    return Corrupt("header length " + std::to_string(n) + " is over the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > file_size - 8) {
    return Corrupt("header length " + std::to_string(n) + " is beyond the file (" +
                   std::to_string(file_size) + " bytes)");
  }
  if (n > file_prefix.size() - 8) {
    return Corrupt("header length " + std::to_string(n) + " but only " +
                   std::to_string(file_prefix.size() - 8) + " header bytes were read");
  }
  if (n == 0) return Corrupt("header is empty (length 0)");

  const std::string_view text(reinterpret_cast<const char*>(file_prefix.data() + 8),
                              static_cast<size_t>(n));
  if (auto bad = format_internal::FirstInvalidUtf8(text)) {
    return Corrupt("header is not valid UTF-8 (ill-formed byte at header offset " +
                   std::to_string(*bad) + ")");
  }
  if (text.front() != '{') {
    return Corrupt("header does not start with '{' (starts with " +
                   QuoteForError(text.substr(0, 16)) + ")");
  }
  Result<Json> root = format_internal::ParseStrictJson(text, kHeaderMaxDepth);
  if (!root.ok()) return Corrupt("header: " + root.status().message());
  // The format allows padding the header with spaces (0x20) only; JSON would also let tabs and
  // newlines through, which other readers may reject.
  const size_t last = text.find_last_not_of(' ');
  if (last == std::string_view::npos || text[last] != '}') {
    return Corrupt("header is padded with characters other than spaces");
  }
  if (!root->is_object()) {
    return Corrupt("header is " + std::string(JsonTypeName(*root)) + ", expected an object");
  }

  header.tensors.reserve(root->size());
  for (const auto& [key, value] : root->items()) {
    if (key == kMetadataKey) {
      WC_RETURN_IF_ERROR(ReadMetadata(value, header.metadata));
      continue;
    }
    WC_ASSIGN_OR_RETURN(TensorInfo info, ReadTensorEntry(key, value));
    header.tensors.push_back(std::move(info));
  }
  WC_RETURN_IF_ERROR(CheckLayout(header.tensors, file_size - 8 - n));
  return header;
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file_prefix,
                                                 uint64_t file_size, std::string_view file_name) {
  Result<SafetensorsHeader> header = ParseChecked(file_prefix, file_size);
  if (!header.ok()) return header.status().WithContext(file_name);
  return header;
}

Result<SafetensorsHeader> ReadSafetensorsHeader(const std::filesystem::path& path) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open(" + name + ")", errno);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return ErrnoStatus("stat(" + name + ")", errno);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(name + ": not a regular file");
  const auto file_size = static_cast<uint64_t>(st.st_size);

  // Read the length first, then exactly the header; the parser reports any bad length, so a
  // length that is too large is never allocated.
  std::vector<uint8_t> prefix(static_cast<size_t>(std::min<uint64_t>(file_size, 8)));
  WC_RETURN_IF_ERROR(ReadExactAt(fd, 0, prefix, name));
  if (prefix.size() == 8) {
    const uint64_t n = LoadLittleEndian64(prefix.data());
    if (n <= kMaxSafetensorsHeaderBytes && n <= file_size - 8) {
      prefix.resize(static_cast<size_t>(8 + n));
      WC_RETURN_IF_ERROR(ReadExactAt(fd, 8, std::span<uint8_t>(prefix).subspan(8), name));
    }
  }
  return ParseSafetensorsHeader(prefix, file_size, name);
}

}  // namespace weightcast
