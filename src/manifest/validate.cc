// ValidateManifest: the one set of consistency rules, shared by BuildManifest (a self-check) and
// ParseManifest (bytes from outside). Every message names the offending entry.
#include <string>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast {
namespace {

std::string FileLabel(size_t i, const ManifestFile& f) {
  return "file " + std::to_string(i) + " (" + f.path.substr(0, 200) + ")";
}

std::string TensorLabel(size_t i, const ManifestTensor& t) {
  return "tensor " + std::to_string(i) + " (" + t.name.substr(0, 200) + ")";
}

Status CheckPath(size_t i, const ManifestFile& f) {
  const std::string& p = f.path;
  if (p.empty()) return Corrupt("file " + std::to_string(i) + " has an empty path");
  if (p.size() > kMaxManifestPathBytes) {
    return Corrupt("file " + std::to_string(i) + " path is " + std::to_string(p.size()) +
                   " bytes, over the limit of " + std::to_string(kMaxManifestPathBytes));
  }
  if (p.find('\0') != std::string::npos) return Corrupt(FileLabel(i, f) + ": path holds a NUL");
  if (p.front() == '/') return Corrupt(FileLabel(i, f) + ": path is absolute");
  size_t start = 0;
  while (start <= p.size()) {
    size_t slash = p.find('/', start);
    if (slash == std::string::npos) slash = p.size();
    std::string_view part(p.data() + start, slash - start);
    if (part.empty() || part == "." || part == "..") {
      return Corrupt(FileLabel(i, f) + ": path has an empty, '.' or '..' component");
    }
    start = slash + 1;
  }
  return Status::Ok();
}

Status CheckFiles(const Manifest& m) {
  if (m.files.empty()) return Corrupt("manifest lists no files");
  if (m.files.size() > kMaxManifestFiles) {
    return Corrupt("manifest lists " + std::to_string(m.files.size()) +
                   " files, over the limit of " + std::to_string(kMaxManifestFiles));
  }
  uint64_t expected_offset = 0;
  for (size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    WC_RETURN_IF_ERROR(CheckPath(i, f));
    if (i > 0 && !(m.files[i - 1].path < f.path)) {
      return Corrupt(FileLabel(i, f) + " is not after " + FileLabel(i - 1, m.files[i - 1]) +
                     " (files must be sorted by path, without duplicates)");
    }
    if (f.offset != expected_offset) {
      return Corrupt(FileLabel(i, f) + " starts at offset " + std::to_string(f.offset) +
                     ", expected " + std::to_string(expected_offset) +
                     " (files must be contiguous in the flat byte space)");
    }
    // Bounding the total by the largest possible snapshot keeps every later sum from overflowing.
    const uint64_t max_total = uint64_t{kMaxManifestChunks} * kMaxChunkSize;
    if (f.size > max_total - expected_offset) {
      return Corrupt(FileLabel(i, f) + " size " + std::to_string(f.size) +
                     " takes the snapshot over " + std::to_string(max_total) + " bytes");
    }
    expected_offset += f.size;
  }
  return Status::Ok();
}

Status CheckChunks(const Manifest& m) {
  if (m.hash_algorithm != HashAlgorithm::kSha256 && m.hash_algorithm != HashAlgorithm::kXxh3_128) {
    return Corrupt("unknown chunk hash algorithm " +
                   std::to_string(static_cast<int>(m.hash_algorithm)));
  }
  if (m.chunk_size < kMinChunkSize || m.chunk_size > kMaxChunkSize) {
    return Corrupt("chunk size " + std::to_string(m.chunk_size) + " is outside [" +
                   std::to_string(kMinChunkSize) + ", " + std::to_string(kMaxChunkSize) + "]");
  }
  if (m.chunk_hashes.size() > kMaxManifestChunks) {
    return Corrupt("manifest lists " + std::to_string(m.chunk_hashes.size()) +
                   " chunks, over the limit of " + std::to_string(kMaxManifestChunks));
  }
  const uint64_t total = m.total_size();
  const uint64_t expected = total / m.chunk_size + (total % m.chunk_size != 0 ? 1 : 0);
  if (m.chunk_hashes.size() != expected) {
    return Corrupt("manifest lists " + std::to_string(m.chunk_hashes.size()) +
                   " chunk hashes, but " + std::to_string(total) + " bytes in chunks of " +
                   std::to_string(m.chunk_size) + " make " + std::to_string(expected));
  }
  if (m.hash_algorithm == HashAlgorithm::kXxh3_128) {
    // A 16-byte digest stored in a 32-byte slot: the tail must be zero (digest.h).
    for (size_t i = 0; i < m.chunk_hashes.size(); ++i) {
      for (size_t b = 16; b < 32; ++b) {
        if (m.chunk_hashes[i][b] != 0) {
          return Corrupt("chunk " + std::to_string(i) +
                         ": an xxh3-128 hash must have its last 16 bytes zero");
        }
      }
    }
  }
  return Status::Ok();
}

// Fast hashes are XXH3-128 digests beside SHA-256 chunk hashes; an xxh3-128 manifest's chunk
// hashes are that already.
Status CheckFastHashes(const Manifest& m) {
  if (m.fast_hashes.empty()) return Status::Ok();
  if (m.hash_algorithm != HashAlgorithm::kSha256) {
    return Corrupt("fast hashes in an " + std::string(HashAlgorithmName(m.hash_algorithm)) +
                   " manifest (its chunk hashes are the fast check already)");
  }
  if (m.fast_hashes.size() != m.chunk_hashes.size()) {
    return Corrupt("manifest lists " + std::to_string(m.fast_hashes.size()) + " fast hashes for " +
                   std::to_string(m.chunk_hashes.size()) + " chunks (one per chunk, or none)");
  }
  for (size_t i = 0; i < m.fast_hashes.size(); ++i) {
    for (size_t b = 16; b < 32; ++b) {
      if (m.fast_hashes[i][b] != 0) {
        return Corrupt("fast hash " + std::to_string(i) +
                       ": an xxh3-128 hash must have its last 16 bytes zero");
      }
    }
  }
  return Status::Ok();
}

// Device checks are 16-byte weighted sums, one per chunk, whatever the chunk hash algorithm.
Status CheckDeviceChecks(const Manifest& m) {
  if (m.device_checks.empty()) return Status::Ok();
  if (m.device_checks.size() != m.chunk_hashes.size()) {
    return Corrupt("manifest lists " + std::to_string(m.device_checks.size()) +
                   " device checks for " + std::to_string(m.chunk_hashes.size()) +
                   " chunks (one per chunk, or none)");
  }
  for (size_t i = 0; i < m.device_checks.size(); ++i) {
    for (size_t b = 16; b < 32; ++b) {
      if (m.device_checks[i][b] != 0) {
        return Corrupt("device check " + std::to_string(i) + ": must have its last 16 bytes zero");
      }
    }
  }
  return Status::Ok();
}

Status CheckTensors(const Manifest& m) {
  if (m.tensors.size() > kMaxManifestTensors) {
    return Corrupt("manifest lists " + std::to_string(m.tensors.size()) +
                   " tensors, over the limit of " + std::to_string(kMaxManifestTensors));
  }
  uint64_t previous_end = 0;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const ManifestTensor& t = m.tensors[i];
    if (t.name.size() > kMaxTensorNameBytes) {
      return Corrupt("tensor " + std::to_string(i) + " name is " + std::to_string(t.name.size()) +
                     " bytes, over the limit of " + std::to_string(kMaxTensorNameBytes));
    }
    if (static_cast<size_t>(t.dtype) > static_cast<size_t>(DType::kF4)) {
      return Corrupt(TensorLabel(i, t) + ": dtype " + std::to_string(static_cast<int>(t.dtype)) +
                     " is out of range");
    }
    if (t.shape.size() > kMaxTensorRank) {
      return Corrupt(TensorLabel(i, t) + ": rank " + std::to_string(t.shape.size()) +
                     " is over the limit of " + std::to_string(kMaxTensorRank));
    }
    Result<uint64_t> bytes = TensorByteSize(t.dtype, t.shape);
    if (!bytes.ok()) return Corrupt(TensorLabel(i, t) + ": " + bytes.status().message());
    if (*bytes != t.size) {
      return Corrupt(TensorLabel(i, t) + ": shape and dtype " + std::string(DTypeName(t.dtype)) +
                     " make " + std::to_string(*bytes) + " bytes, but its size is " +
                     std::to_string(t.size));
    }
    if (t.file_index >= m.files.size()) {
      return Corrupt(TensorLabel(i, t) + ": file index " + std::to_string(t.file_index) +
                     " is beyond the " + std::to_string(m.files.size()) + " files");
    }
    const ManifestFile& f = m.files[t.file_index];
    // Subtractions, not sums: t.offset and t.size come from outside and may be near 2^64.
    if (t.offset < f.offset || t.offset - f.offset > f.size ||
        t.size > f.size - (t.offset - f.offset)) {
      return Corrupt(TensorLabel(i, t) + ": bytes [" + std::to_string(t.offset) + ", +" +
                     std::to_string(t.size) + ") are outside " + FileLabel(t.file_index, f) + " [" +
                     std::to_string(f.offset) + ", +" + std::to_string(f.size) + ")");
    }
    if (t.offset < previous_end) {
      return Corrupt(TensorLabel(i, t) + " at offset " + std::to_string(t.offset) +
                     " overlaps or precedes the tensor before it (ends at " +
                     std::to_string(previous_end) + "; tensors must be sorted by offset)");
    }
    previous_end = t.offset + t.size;
  }
  return Status::Ok();
}

Status CheckMetadata(const Manifest& m) {
  if (m.metadata.size() > kMaxMetadataEntries) {
    return Corrupt("manifest has " + std::to_string(m.metadata.size()) +
                   " metadata entries, over the limit of " + std::to_string(kMaxMetadataEntries));
  }
  for (const auto& [key, value] : m.metadata) {
    if (key.empty() || key.size() > kMaxMetadataKeyBytes) {
      return Corrupt("metadata key of " + std::to_string(key.size()) + " bytes (must be 1.." +
                     std::to_string(kMaxMetadataKeyBytes) + ")");
    }
    if (value.size() > kMaxMetadataValueBytes) {
      return Corrupt("metadata value of '" + key.substr(0, 64) + "' is " +
                     std::to_string(value.size()) + " bytes, over the limit of " +
                     std::to_string(kMaxMetadataValueBytes));
    }
  }
  return Status::Ok();
}

Status CheckDelta(const Manifest& m) {
  if (!m.delta.has_value()) return Status::Ok();
  const DeltaInfo& d = *m.delta;
  if (d.base_version.value() == 0 || d.base_version >= m.version) {
    return Corrupt("delta base version " + std::to_string(d.base_version.value()) +
                   " must be between 1 and the version (" + std::to_string(m.version.value()) +
                   ") exclusive");
  }
  // SHA-256 always; the chunk algorithm is accepted for tables written before that rule.
  if (d.payload_hash_algorithm != HashAlgorithm::kSha256 &&
      d.payload_hash_algorithm != m.hash_algorithm) {
    return Corrupt("delta payload hashes are " +
                   std::string(HashAlgorithmName(d.payload_hash_algorithm)) +
                   "; they must be sha256");
  }
  if (d.chunks.size() != m.chunk_hashes.size()) {
    return Corrupt("delta describes " + std::to_string(d.chunks.size()) +
                   " chunks, the version has " + std::to_string(m.chunk_hashes.size()));
  }
  // A compressed chunk may grow a little past the chunk size on incompressible data; anything
  // beyond twice the chunk size is not a payload any codec of ours produces.
  const uint64_t max_payload = 2 * m.chunk_size + (1 << 20);
  for (size_t i = 0; i < d.chunks.size(); ++i) {
    const DeltaChunk& c = d.chunks[i];
    if (c.encoding != ChunkEncoding::kFull && c.encoding != ChunkEncoding::kSame &&
        c.encoding != ChunkEncoding::kXor) {
      return Corrupt("delta chunk " + std::to_string(i) + ": encoding " +
                     std::to_string(static_cast<int>(c.encoding)) + " is out of range");
    }
    if (c.encoding == ChunkEncoding::kSame && c.payload_size != 0) {
      return Corrupt("delta chunk " + std::to_string(i) + " is 'same' but has a payload of " +
                     std::to_string(c.payload_size) + " bytes");
    }
    if (c.payload_size > max_payload) {
      return Corrupt("delta chunk " + std::to_string(i) + ": payload of " +
                     std::to_string(c.payload_size) + " bytes is over the limit of " +
                     std::to_string(max_payload));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateChannelName(std::string_view channel) {
  if (channel.empty() || channel.size() > kMaxChannelBytes) {
    return InvalidArgument("channel name must be 1.." + std::to_string(kMaxChannelBytes) +
                           " bytes, got " + std::to_string(channel.size()));
  }
  if (channel.front() == '.') {
    return InvalidArgument("channel name '" + std::string(channel) + "' starts with '.'");
  }
  for (char c : channel) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) {
      return InvalidArgument("channel name '" + std::string(channel.substr(0, 64)) +
                             "' has a character outside [A-Za-z0-9._-]");
    }
  }
  return Status::Ok();
}

Status ValidateManifest(const Manifest& m) {
  if (m.format_version != kManifestFormatVersion) {
    return Corrupt("manifest format version " + std::to_string(m.format_version) +
                   " is not the supported version " + std::to_string(kManifestFormatVersion));
  }
  if (Status s = ValidateChannelName(m.channel); !s.ok()) return Corrupt(s.message());
  if (m.version.value() == 0) return Corrupt("manifest version is 0 (versions start at 1)");
  WC_RETURN_IF_ERROR(CheckFiles(m));
  WC_RETURN_IF_ERROR(CheckChunks(m));
  WC_RETURN_IF_ERROR(CheckFastHashes(m));
  WC_RETURN_IF_ERROR(CheckDeviceChecks(m));
  WC_RETURN_IF_ERROR(CheckTensors(m));
  WC_RETURN_IF_ERROR(CheckMetadata(m));
  WC_RETURN_IF_ERROR(CheckDelta(m));
  const Digest root = ComputeRoot(m);
  if (root != m.root) {
    return Corrupt("root hash mismatch: the manifest says " + ToHex(m.root) +
                   ", its content hashes to " + ToHex(root));
  }
  return Status::Ok();
}

}  // namespace weightcast
