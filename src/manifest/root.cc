// The root hash's canonical encoding (docs/manifest_format.md, "Root hash"). It is defined here
// byte for byte, independently of protobuf, whose encoding is not canonical (field order, packed
// or not, and unknown fields may all vary between writers of the same message).
#include <array>
#include <cstring>

#include "manifest/builder.h"

namespace weightcast {
namespace {

constexpr std::string_view kRootDomain = "weightcast/manifest-root/v1";

class StringSink {
 public:
  void Put(std::span<const uint8_t> bytes) {
    out_.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Buffers small writes so that a manifest of millions of chunks is hashed in large updates and
// never held in memory whole.
class HashSink {
 public:
  HashSink() : hasher_(HashAlgorithm::kSha256) {}
  void Put(std::span<const uint8_t> bytes) {
    if (used_ + bytes.size() > buffer_.size()) Flush();
    if (bytes.size() >= buffer_.size()) {
      hasher_.Update(bytes);
      return;
    }
    std::memcpy(buffer_.data() + used_, bytes.data(), bytes.size());
    used_ += bytes.size();
  }
  Digest Finish() {
    Flush();
    return hasher_.Finish();
  }

 private:
  void Flush() {
    hasher_.Update({buffer_.data(), used_});
    used_ = 0;
  }
  Hasher hasher_;
  std::array<uint8_t, 64 << 10> buffer_{};
  size_t used_ = 0;
};

template <typename Sink>
class Encoder {
 public:
  explicit Encoder(Sink& sink) : sink_(sink) {}

  void U8(uint8_t v) { sink_.Put({&v, 1}); }
  void U32(uint32_t v) {
    std::array<uint8_t, 4> b;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    sink_.Put(b);
  }
  void U64(uint64_t v) {
    std::array<uint8_t, 8> b;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
    sink_.Put(b);
  }
  void Bytes(std::string_view s) {
    U64(s.size());
    sink_.Put(AsBytes(s));
  }
  void Raw(std::span<const uint8_t> bytes) { sink_.Put(bytes); }

 private:
  Sink& sink_;
};

template <typename Sink>
void EncodeRootFields(const Manifest& m, Sink& sink) {
  Encoder<Sink> e(sink);
  e.Bytes(kRootDomain);
  e.U8(static_cast<uint8_t>(m.hash_algorithm));
  e.U64(m.chunk_size);
  e.U64(m.files.size());
  for (const ManifestFile& f : m.files) {
    e.Bytes(f.path);
    e.U64(f.size);
    e.U64(f.offset);
  }
  e.U64(m.tensors.size());
  for (const ManifestTensor& t : m.tensors) {
    e.Bytes(t.name);
    // The dtype travels by its safetensors name, so the root does not depend on enum numbering.
    e.Bytes(DTypeName(t.dtype));
    e.U64(t.shape.size());
    for (uint64_t dim : t.shape) e.U64(dim);
    e.U32(t.file_index);
    e.U64(t.offset);
    e.U64(t.size);
  }
  e.U64(m.chunk_hashes.size());
  for (const Digest& d : m.chunk_hashes) e.Raw(d);
}

}  // namespace

std::string CanonicalRootEncoding(const Manifest& manifest) {
  StringSink sink;
  EncodeRootFields(manifest, sink);
  return sink.Take();
}

Digest ComputeRoot(const Manifest& manifest) {
  HashSink sink;
  EncodeRootFields(manifest, sink);
  return sink.Finish();
}

}  // namespace weightcast
