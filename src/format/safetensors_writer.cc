// SafetensorsWriter: streams a safetensors file to disk in bounded memory.
//
// The file is written under a temporary name beside the final one and renamed on Finish(), so a
// reader that opens the final name sees either nothing (or the previous file) or the complete
// new file, never a prefix of it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <utility>

#include "format/safetensors.h"
#include "util/file.h"

namespace weightcast {
namespace {

// Small appends are gathered in a buffer of this size before they reach write(2), so callers may
// append element by element without paying a system call each. Appends of at least a quarter of
// it go straight through, saving the copy.
constexpr size_t kWriteBufferBytes = 1 << 20;

class FileSafetensorsWriter final : public SafetensorsWriter {
 public:
  FileSafetensorsWriter(std::filesystem::path final_path, std::filesystem::path tmp_path, int fd,
                        uint64_t data_bytes)
      : final_path_(std::move(final_path)),
        tmp_path_(std::move(tmp_path)),
        fd_(fd),
        data_bytes_(data_bytes) {}

  ~FileSafetensorsWriter() override {
    // Abandoned before Finish(): the temporary file must not linger as garbage.
    if (fd_ >= 0) ::close(fd_);
    if (!finished_) ::unlink(tmp_path_.c_str());
  }

  FileSafetensorsWriter(const FileSafetensorsWriter&) = delete;
  FileSafetensorsWriter& operator=(const FileSafetensorsWriter&) = delete;

  Status WriteHeader(std::string_view header) {
    return WriteAll(fd_, {reinterpret_cast<const uint8_t*>(header.data()), header.size()},
                    tmp_path_.string());
  }

  Status Append(std::span<const uint8_t> bytes) override {
    if (!failed_.ok()) return failed_;
    if (finished_) return FailedPrecondition(final_path_.string() + ": Append after Finish");
    if (bytes.size() > data_bytes_ - appended_) {
      return Fail(OutOfRange(final_path_.string() + ": appending " + std::to_string(bytes.size()) +
                             " bytes at data offset " + std::to_string(appended_) +
                             " overruns the declared " + std::to_string(data_bytes_) +
                             " data bytes"));
    }
    appended_ += bytes.size();
    if (bytes.size() >= kWriteBufferBytes / 4) {
      WC_RETURN_IF_ERROR(Flush());
      Status st = WriteAll(fd_, bytes, tmp_path_.string());
      if (!st.ok()) return Fail(st);
      return Status::Ok();
    }
    if (buffer_.size() + bytes.size() <= kWriteBufferBytes) {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
      return Status::Ok();
    }
    WC_RETURN_IF_ERROR(Flush());
    buffer_.assign(bytes.begin(), bytes.end());
    return Status::Ok();
  }

  Status Finish() override {
    if (!failed_.ok()) return failed_;
    if (finished_) return FailedPrecondition(final_path_.string() + ": Finish called twice");
    if (appended_ != data_bytes_) {
      return Fail(FailedPrecondition(final_path_.string() + ": Finish after " +
                                     std::to_string(appended_) + " of " +
                                     std::to_string(data_bytes_) + " declared data bytes"));
    }
    WC_RETURN_IF_ERROR(Flush());
    if (::fsync(fd_) != 0) return Fail(ErrnoStatus("fsync(" + tmp_path_.string() + ")", errno));
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) return Fail(ErrnoStatus("close(" + tmp_path_.string() + ")", errno));
    if (::rename(tmp_path_.c_str(), final_path_.c_str()) != 0) {
      return Fail(ErrnoStatus("rename(" + tmp_path_.string() + ")", errno));
    }
    finished_ = true;
    std::filesystem::path dir = final_path_.parent_path();
    return FsyncPath(dir.empty() ? std::filesystem::path(".") : dir);
  }

 private:
  Status Flush() {
    if (buffer_.empty()) return Status::Ok();
    Status st = WriteAll(fd_, buffer_, tmp_path_.string());
    buffer_.clear();
    if (!st.ok()) return Fail(st);
    return Status::Ok();
  }

  // Once a write failed the file is unusable; every later call reports the first error.
  Status Fail(Status st) {
    failed_ = st;
    return st;
  }

  std::filesystem::path final_path_;
  std::filesystem::path tmp_path_;
  int fd_;
  uint64_t data_bytes_;
  uint64_t appended_ = 0;
  bool finished_ = false;
  Status failed_;
  std::vector<uint8_t> buffer_;
};

}  // namespace

Result<EncodedHeader> EncodeSafetensorsHeader(const std::vector<TensorSpec>& tensors,
                                              const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps the layout order in the header, which makes files easy to read by eye.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty()) return InvalidArgument("tensor with an empty name");
    if (t.name == "__metadata__") return InvalidArgument("tensor named __metadata__");
    if (!names.insert(t.name).second) return InvalidArgument("duplicate tensor " + t.name);
    Result<uint64_t> size = TensorByteSize(t.dtype, t.shape);
    if (!size.ok()) return size.status().WithContext("tensor " + t.name);
    if (*size > UINT64_MAX - offset) return OutOfRange("tensor " + t.name + ": data overflows");
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = std::string(DTypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + *size};
    header[t.name] = std::move(entry);
    offset += *size;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    // dump() throws on names that are not valid UTF-8.
    return InvalidArgument(std::string("safetensors header: ") + e.what());
  }
  size_t padded = (json.size() + 7) / 8 * 8;
  json.resize(padded, ' ');
  if (json.size() > kMaxSafetensorsHeaderBytes) {
    return OutOfRange("safetensors header of " + std::to_string(json.size()) +
                      " bytes is over the limit of " + std::to_string(kMaxSafetensorsHeaderBytes));
  }
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out += json;
  return EncodedHeader{std::move(out), offset};
}

Result<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::filesystem::path& path, std::vector<TensorSpec> tensors,
    const std::map<std::string, std::string>& metadata) {
  Result<EncodedHeader> header = EncodeSafetensorsHeader(tensors, metadata);
  if (!header.ok()) return header.status().WithContext(path.string());

  // A name no other writer will pick: a dot file beside the target, so directory listings that
  // skip hidden files do not show it as a checkpoint shard.
  std::random_device rd;
  std::filesystem::path tmp =
      path.parent_path() / ("." + path.filename().string() + ".partial." +
                            std::to_string(::getpid()) + "." + std::to_string(rd()));
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + tmp.string() + ")", errno);
  auto writer = std::make_unique<FileSafetensorsWriter>(path, tmp, fd, header->data_bytes);
  WC_RETURN_IF_ERROR(writer->WriteHeader(header->bytes));
  return std::unique_ptr<SafetensorsWriter>(std::move(writer));
}

}  // namespace weightcast
