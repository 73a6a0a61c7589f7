#include "swarm/messages.h"

#include <cstring>

namespace weightcast::swarm {
namespace {

template <typename T>
void Put(std::vector<uint8_t>& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T& value) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      v |= static_cast<T>(static_cast<T>(bytes_[pos_ + i]) << (8 * i));
    value = v;
    pos_ += sizeof(T);
    return true;
  }
  bool Take(size_t n, std::span<const uint8_t>& out) {
    if (bytes_.size() - pos_ < n) return false;
    out = bytes_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

}  // namespace

std::vector<uint8_t> EncodeMessage(const Message& message) {
  std::vector<uint8_t> out;
  out.reserve(32 + message.text.size() + message.blob.size());
  Put<uint8_t>(out, static_cast<uint8_t>(message.type));
  Put<uint64_t>(out, message.version);
  Put<uint32_t>(out, message.chunk);
  Put<uint64_t>(out, message.base_version);
  Put<uint8_t>(out, message.code);
  Put<uint32_t>(out, static_cast<uint32_t>(message.text.size()));
  out.insert(out.end(), message.text.begin(), message.text.end());
  Put<uint32_t>(out, static_cast<uint32_t>(message.blob.size()));
  out.insert(out.end(), message.blob.begin(), message.blob.end());
  return out;
}

Result<Message> ParseMessage(std::span<const uint8_t> body) {
  if (body.size() > kMaxMessageBytes) return Corrupt("p2p message above the size limit");
  Reader in(body);
  Message m;
  uint8_t type = 0;
  uint32_t text_size = 0, blob_size = 0;
  std::span<const uint8_t> text, blob;
  if (!in.Get(type) || !in.Get(m.version) || !in.Get(m.chunk) || !in.Get(m.base_version) ||
      !in.Get(m.code) || !in.Get(text_size) || !in.Take(text_size, text) || !in.Get(blob_size) ||
      !in.Take(blob_size, blob)) {
    return Corrupt("p2p message truncated (" + std::to_string(body.size()) + " bytes)");
  }
  if (!in.done()) return Corrupt("p2p message has trailing bytes");
  if (type < 1 || type > kMaxMessageType)
    return Corrupt("p2p message of unknown type " + std::to_string(type));
  m.type = static_cast<MessageType>(type);
  m.text.assign(text.begin(), text.end());
  m.blob.assign(blob.begin(), blob.end());
  return m;
}

std::vector<uint8_t> PackBits(const std::vector<bool>& bits) {
  std::vector<uint8_t> out((bits.size() + 7) / 8, 0);
  for (size_t i = 0; i < bits.size(); ++i) {
    if (bits[i]) out[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  }
  return out;
}

Result<std::vector<bool>> UnpackBits(std::span<const uint8_t> bytes, uint32_t count) {
  if (bytes.size() != (size_t{count} + 7) / 8) {
    return Corrupt("have-set of " + std::to_string(bytes.size()) + " bytes for " +
                   std::to_string(count) + " chunks");
  }
  std::vector<bool> bits(count, false);
  for (size_t i = 0; i < bytes.size() * 8; ++i) {
    const bool set = ((bytes[i / 8] >> (i % 8)) & 1) != 0;
    if (i >= count) {
      if (set) return Corrupt("have-set has a bit past its chunk count");
      continue;
    }
    bits[i] = set;
  }
  return bits;
}

Status ErrorStatus(const Message& message) {
  Code code = message.code <= static_cast<uint8_t>(Code::kInternal)
                  ? static_cast<Code>(message.code)
                  : Code::kInternal;
  if (code == Code::kOk) code = Code::kInternal;
  return Status(code, "server: " + message.text);
}

}  // namespace weightcast::swarm
