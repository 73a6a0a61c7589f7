// Protobuf encoding of manifests. Everything protobuf-specific stays in this file: the rest of
// the code base sees Manifest structs, Status and bytes.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/wire_format_lite.h>

#include <climits>
#include <cstring>
#include <exception>

#include "manifest/builder.h"
#include "manifest/manifest.pb.h"
#include "util/file.h"

namespace weightcast {
namespace {

namespace pb = ::weightcast::manifest;

std::string DigestBytes(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

Result<Digest> ToDigest(const std::string& bytes, std::string_view what) {
  Digest d{};
  if (bytes.size() != d.size()) {
    return Corrupt(std::string(what) + " is " + std::to_string(bytes.size()) + " bytes, expected " +
                   std::to_string(d.size()));
  }
  std::memcpy(d.data(), bytes.data(), d.size());
  return d;
}

// A 16-byte XXH3-128 digest on the wire, stored as a Digest with a zero tail (digest.h).
Result<Digest> ToFastDigest(const std::string& bytes, std::string_view what,
                            std::string_view algorithm = "xxh3-128") {
  Digest d{};
  if (bytes.size() != 16) {
    return Corrupt(std::string(what) + " is " + std::to_string(bytes.size()) +
                   " bytes, expected 16 (" + std::string(algorithm) + ")");
  }
  std::memcpy(d.data(), bytes.data(), 16);
  return d;
}

Result<HashAlgorithm> FromProtoAlgorithm(int value, std::string_view what) {
  switch (value) {
    case pb::HASH_ALGORITHM_SHA256:
      return HashAlgorithm::kSha256;
    case pb::HASH_ALGORITHM_XXH3_128:
      return HashAlgorithm::kXxh3_128;
    default:
      return Corrupt("unknown " + std::string(what) + " " + std::to_string(value));
  }
}

pb::HashAlgorithm ToProtoAlgorithm(HashAlgorithm algorithm) {
  return algorithm == HashAlgorithm::kXxh3_128 ? pb::HASH_ALGORITHM_XXH3_128
                                               : pb::HASH_ALGORITHM_SHA256;
}

Status CheckCount(size_t count, size_t limit, std::string_view what) {
  if (count > limit) {
    return Corrupt("manifest lists " + std::to_string(count) + " " + std::string(what) +
                   ", over the limit of " + std::to_string(limit));
  }
  return Status::Ok();
}

std::string FutureVersionMessage(uint64_t version) {
  return "manifest format version " + std::to_string(version) +
         " is newer than this build of weightcast reads (" +
         std::to_string(kManifestFormatVersion) + "); upgrade weightcast to read it";
}

// Writers emit fields in field-number order, so a manifest starts with format_version (field 1,
// varint: tag byte 0x08). Reading it by hand gives a clear "too new" message even when a future
// schema no longer parses as this one.
std::optional<uint64_t> PeekFormatVersion(std::span<const uint8_t> bytes) {
  if (bytes.empty() || bytes[0] != 0x08) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 1; i < bytes.size() && i <= 10; ++i) {
    v |= uint64_t{bytes[i] & 0x7fu} << (7 * (i - 1));
    if ((bytes[i] & 0x80) == 0) return v;
  }
  return std::nullopt;
}

// Counts the entries of each repeated field by walking the wire format, without building any
// message, so that input like a million empty `File` entries (2 bytes each on the wire, a hundred
// bytes each once parsed) is refused before protobuf allocates for it.
Status PrescanCounts(std::span<const uint8_t> bytes) {
  using google::protobuf::internal::WireFormatLite;
  struct Limit {
    uint32_t field;
    size_t max;
    const char* what;
  };
  static constexpr Limit kTopLevel[] = {
      {6, kMaxManifestFiles, "files"},         {7, kMaxManifestTensors, "tensors"},
      {8, kMaxManifestChunks, "chunk hashes"}, {9, kMaxMetadataEntries, "metadata entries"},
      {12, kMaxManifestChunks, "fast hashes"}, {13, kMaxManifestChunks, "device checks"}};
  constexpr uint32_t kDeltaField = 10;
  constexpr uint32_t kDeltaChunksField = 3;
  size_t counts[14] = {};
  size_t delta_chunks = 0;
  google::protobuf::io::CodedInputStream in(bytes.data(), static_cast<int>(bytes.size()));
  for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
    const uint32_t field = WireFormatLite::GetTagFieldNumber(tag);
    if (field < std::size(counts)) ++counts[field];
    if (field == kDeltaField &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      const void* data = nullptr;
      int size = 0;
      if (!in.ReadVarint32(&length) || !in.GetDirectBufferPointer(&data, &size) ||
          static_cast<uint32_t>(size) < length) {
        return Corrupt("manifest is not a valid protobuf (delta section cut short)");
      }
      google::protobuf::io::CodedInputStream sub(static_cast<const uint8_t*>(data),
                                                 static_cast<int>(length));
      for (uint32_t t = sub.ReadTag(); t != 0; t = sub.ReadTag()) {
        if (WireFormatLite::GetTagFieldNumber(t) == kDeltaChunksField) ++delta_chunks;
        if (!WireFormatLite::SkipField(&sub, t)) break;  // the full parse reports it
      }
      in.Skip(static_cast<int>(length));
      continue;
    }
    if (!WireFormatLite::SkipField(&in, tag)) break;  // the full parse reports it
  }
  for (const Limit& limit : kTopLevel) {
    WC_RETURN_IF_ERROR(CheckCount(counts[limit.field], limit.max, limit.what));
  }
  return CheckCount(delta_chunks, kMaxManifestChunks, "delta chunks");
}

Result<Manifest> FromProto(const pb::Manifest& p) {
  if (p.format_version() == 0) {
    return Corrupt("manifest has no format_version (is this a weightcast manifest?)");
  }
  if (p.format_version() > kManifestFormatVersion) {
    return Corrupt(FutureVersionMessage(p.format_version()));
  }
  // Bound every count before reserving or copying anything.
  WC_RETURN_IF_ERROR(CheckCount(static_cast<size_t>(p.files_size()), kMaxManifestFiles, "files"));
  WC_RETURN_IF_ERROR(
      CheckCount(static_cast<size_t>(p.tensors_size()), kMaxManifestTensors, "tensors"));
  WC_RETURN_IF_ERROR(
      CheckCount(static_cast<size_t>(p.chunk_hashes_size()), kMaxManifestChunks, "chunks"));
  WC_RETURN_IF_ERROR(
      CheckCount(static_cast<size_t>(p.fast_hashes_size()), kMaxManifestChunks, "fast hashes"));
  WC_RETURN_IF_ERROR(
      CheckCount(static_cast<size_t>(p.device_checks_size()), kMaxManifestChunks, "device checks"));
  WC_RETURN_IF_ERROR(CheckCount(p.metadata().size(), kMaxMetadataEntries, "metadata entries"));
  if (p.channel().size() > kMaxChannelBytes) {
    return Corrupt("channel name is " + std::to_string(p.channel().size()) +
                   " bytes, over the limit of " + std::to_string(kMaxChannelBytes));
  }

  Manifest m;
  m.format_version = p.format_version();
  m.channel = p.channel();
  m.version = Version(p.version());
  WC_ASSIGN_OR_RETURN(m.hash_algorithm,
                      FromProtoAlgorithm(p.hash_algorithm(), "chunk hash algorithm"));
  m.chunk_size = p.chunk_size();

  m.files.reserve(static_cast<size_t>(p.files_size()));
  for (const pb::File& f : p.files()) {
    if (f.path().size() > kMaxManifestPathBytes) {
      return Corrupt("file " + std::to_string(m.files.size()) + " path is " +
                     std::to_string(f.path().size()) + " bytes, over the limit of " +
                     std::to_string(kMaxManifestPathBytes));
    }
    m.files.push_back({f.path(), f.size(), f.offset()});
  }

  m.tensors.reserve(static_cast<size_t>(p.tensors_size()));
  for (const pb::Tensor& t : p.tensors()) {
    const std::string index = std::to_string(m.tensors.size());
    if (t.name().size() > kMaxTensorNameBytes) {
      return Corrupt("tensor " + index + " name is " + std::to_string(t.name().size()) +
                     " bytes, over the limit of " + std::to_string(kMaxTensorNameBytes));
    }
    const int dtype = t.dtype();
    if (dtype < 1 || dtype > static_cast<int>(DType::kF4) + 1) {
      return Corrupt("tensor " + index + " (" + t.name().substr(0, 200) + "): dtype " +
                     std::to_string(dtype) + " is out of range");
    }
    if (static_cast<size_t>(t.shape_size()) > kMaxTensorRank) {
      return Corrupt("tensor " + index + ": rank " + std::to_string(t.shape_size()) +
                     " is over the limit of " + std::to_string(kMaxTensorRank));
    }
    ManifestTensor out;
    out.name = t.name();
    out.dtype = static_cast<DType>(dtype - 1);
    out.shape.assign(t.shape().begin(), t.shape().end());
    out.file_index = t.file_index();
    out.offset = t.offset();
    out.size = t.size();
    m.tensors.push_back(std::move(out));
  }

  m.chunk_hashes.reserve(static_cast<size_t>(p.chunk_hashes_size()));
  for (const std::string& h : p.chunk_hashes()) {
    WC_ASSIGN_OR_RETURN(Digest d,
                        ToDigest(h, "chunk hash " + std::to_string(m.chunk_hashes.size())));
    m.chunk_hashes.push_back(d);
  }

  m.fast_hashes.reserve(static_cast<size_t>(p.fast_hashes_size()));
  for (const std::string& h : p.fast_hashes()) {
    WC_ASSIGN_OR_RETURN(Digest d,
                        ToFastDigest(h, "fast hash " + std::to_string(m.fast_hashes.size())));
    m.fast_hashes.push_back(d);
  }

  m.device_checks.reserve(static_cast<size_t>(p.device_checks_size()));
  for (const std::string& h : p.device_checks()) {
    WC_ASSIGN_OR_RETURN(
        Digest d,
        ToFastDigest(h, "device check " + std::to_string(m.device_checks.size()), "wsum-128"));
    m.device_checks.push_back(d);
  }

  for (const auto& [key, value] : p.metadata()) m.metadata.emplace(key, value);

  if (p.has_delta()) {
    const pb::Delta& pd = p.delta();
    WC_RETURN_IF_ERROR(
        CheckCount(static_cast<size_t>(pd.chunks_size()), kMaxManifestChunks, "delta chunks"));
    DeltaInfo d;
    d.base_version = Version(pd.base_version());
    WC_ASSIGN_OR_RETURN(d.base_root, ToDigest(pd.base_root(), "delta base root"));
    // Absent in manifests written before payload hashes were always SHA-256: the chunk algorithm.
    if (pd.payload_hash_algorithm() == pb::HASH_ALGORITHM_UNSPECIFIED) {
      d.payload_hash_algorithm = m.hash_algorithm;
    } else {
      WC_ASSIGN_OR_RETURN(d.payload_hash_algorithm, FromProtoAlgorithm(pd.payload_hash_algorithm(),
                                                                       "payload hash algorithm"));
    }
    d.chunks.reserve(static_cast<size_t>(pd.chunks_size()));
    for (const pb::DeltaChunk& c : pd.chunks()) {
      const std::string index = std::to_string(d.chunks.size());
      if (c.encoding() < 0 || c.encoding() > static_cast<int>(ChunkEncoding::kXor)) {
        return Corrupt("delta chunk " + index + ": encoding " + std::to_string(c.encoding()) +
                       " is out of range");
      }
      DeltaChunk out;
      out.encoding = static_cast<ChunkEncoding>(c.encoding());
      out.payload_size = c.payload_size();
      WC_ASSIGN_OR_RETURN(out.payload_hash,
                          ToDigest(c.payload_hash(), "delta chunk " + index + " payload hash"));
      d.chunks.push_back(out);
    }
    m.delta = std::move(d);
  }

  WC_ASSIGN_OR_RETURN(m.root, ToDigest(p.root(), "root hash"));
  return m;
}

void ToProto(const Manifest& m, pb::Manifest& p) {
  p.set_format_version(m.format_version);
  p.set_channel(m.channel);
  p.set_version(m.version.value());
  p.set_hash_algorithm(ToProtoAlgorithm(m.hash_algorithm));
  p.set_chunk_size(m.chunk_size);
  p.mutable_files()->Reserve(static_cast<int>(m.files.size()));
  for (const ManifestFile& f : m.files) {
    pb::File* out = p.add_files();
    out->set_path(f.path);
    out->set_size(f.size);
    out->set_offset(f.offset);
  }
  p.mutable_tensors()->Reserve(static_cast<int>(m.tensors.size()));
  for (const ManifestTensor& t : m.tensors) {
    pb::Tensor* out = p.add_tensors();
    out->set_name(t.name);
    out->set_dtype(static_cast<pb::DType>(static_cast<int>(t.dtype) + 1));
    for (uint64_t dim : t.shape) out->add_shape(dim);
    out->set_file_index(t.file_index);
    out->set_offset(t.offset);
    out->set_size(t.size);
  }
  p.mutable_chunk_hashes()->Reserve(static_cast<int>(m.chunk_hashes.size()));
  for (const Digest& d : m.chunk_hashes) p.add_chunk_hashes(DigestBytes(d));
  p.mutable_fast_hashes()->Reserve(static_cast<int>(m.fast_hashes.size()));
  for (const Digest& d : m.fast_hashes) {
    p.add_fast_hashes(std::string(reinterpret_cast<const char*>(d.data()), 16));
  }
  p.mutable_device_checks()->Reserve(static_cast<int>(m.device_checks.size()));
  for (const Digest& d : m.device_checks) {
    p.add_device_checks(std::string(reinterpret_cast<const char*>(d.data()), 16));
  }
  for (const auto& [key, value] : m.metadata) (*p.mutable_metadata())[key] = value;
  if (m.delta.has_value()) {
    pb::Delta* d = p.mutable_delta();
    d->set_base_version(m.delta->base_version.value());
    d->set_base_root(DigestBytes(m.delta->base_root));
    d->set_payload_hash_algorithm(ToProtoAlgorithm(m.delta->payload_hash_algorithm));
    for (const DeltaChunk& c : m.delta->chunks) {
      pb::DeltaChunk* out = d->add_chunks();
      out->set_encoding(static_cast<pb::ChunkEncoding>(c.encoding));
      out->set_payload_size(c.payload_size);
      out->set_payload_hash(DigestBytes(c.payload_hash));
    }
  }
  p.set_root(DigestBytes(m.root));
}

}  // namespace

std::string SerializeManifest(const Manifest& manifest) {
  pb::Manifest p;
  ToProto(manifest, p);
  std::string out;
  {
    // Deterministic: map entries sorted, so the same manifest always gives the same bytes (an
    // HMAC over them is then reproducible).
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    p.SerializeToCodedStream(&coded);
  }
  return out;
}

Result<Manifest> ParseManifest(std::span<const uint8_t> bytes) {
  if (bytes.size() > kMaxManifestBytes) {
    return Corrupt("manifest is " + std::to_string(bytes.size()) + " bytes, over the limit of " +
                   std::to_string(kMaxManifestBytes));
  }
  if (bytes.empty()) return Corrupt("manifest is empty");
  try {
    // Bad input is reported through our Status; keep protobuf's own log lines (invalid UTF-8 in a
    // string field, ...) off the user's terminal while parsing.
    google::protobuf::LogSilencer silence_protobuf_logs;
    WC_RETURN_IF_ERROR(PrescanCounts(bytes));
    pb::Manifest p;
    if (!p.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      std::optional<uint64_t> version = PeekFormatVersion(bytes);
      if (version.has_value() && *version > kManifestFormatVersion) {
        return Corrupt(FutureVersionMessage(*version));
      }
      return Corrupt("manifest is not a valid protobuf weightcast.manifest.Manifest (" +
                     std::to_string(bytes.size()) + " bytes)");
    }
    WC_ASSIGN_OR_RETURN(Manifest m, FromProto(p));
    WC_RETURN_IF_ERROR(ValidateManifest(m));
    return m;
  } catch (const std::exception& e) {
    return Corrupt(std::string("manifest could not be decoded: ") + e.what());
  }
}

Status WriteManifestFile(const std::filesystem::path& path, const Manifest& manifest) {
  if (Status s = ValidateManifest(manifest); !s.ok()) {
    return Internal("refusing to write an invalid manifest to " + path.string() + ": " +
                    s.message());
  }
  return WriteFileAtomic(path, SerializeManifest(manifest));
}

Result<Manifest> ReadManifestFile(const std::filesystem::path& path) {
  WC_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path, kMaxManifestBytes));
  Result<Manifest> m = ParseManifest(AsBytes(bytes));
  if (!m.ok()) return m.status().WithContext(path.string());
  return m;
}

}  // namespace weightcast
