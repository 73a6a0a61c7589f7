#include "live/delta_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <system_error>

#include "hash/digest.h"
#include "store/layout.h"

namespace weightcast::live {

namespace fs = std::filesystem;

namespace {

// Header (docs/live.md): magic, format, version, base version, chunk count, payload total, the
// version's root and the base's root. All integers little-endian.
constexpr char kMagic[4] = {'W', 'C', 'L', 'D'};
constexpr uint32_t kFormat = 1;
constexpr size_t kHeaderSize = 4 + 4 + 8 + 8 + 4 + 4 + 8 + 32 + 32;

void Put(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

std::vector<uint8_t> Header(const Manifest& m, uint64_t total) {
  std::vector<uint8_t> h;
  h.reserve(kHeaderSize);
  h.insert(h.end(), kMagic, kMagic + 4);
  Put(h, kFormat, 4);
  Put(h, m.version.value(), 8);
  Put(h, m.delta->base_version.value(), 8);
  Put(h, m.chunk_count(), 4);
  Put(h, 0, 4);
  Put(h, total, 8);
  h.insert(h.end(), m.root.begin(), m.root.end());
  h.insert(h.end(), m.delta->base_root.begin(), m.delta->base_root.end());
  return h;
}

uint64_t PayloadTotal(const DeltaInfo& d) {
  uint64_t total = 0;
  for (const DeltaChunk& c : d.chunks) total += c.payload_size;
  return total;
}

}  // namespace

fs::path DeltaFilePath(const fs::path& store_root, std::string_view channel, Version version) {
  return store_root / ".live" / std::string(channel) / (std::to_string(version.value()) + ".delta");
}

Status WriteDeltaFile(const fs::path& store_root, const Manifest& manifest,
                      const PayloadOf& payload_of) {
  return WriteDeltaFileAt(DeltaFilePath(store_root, manifest.channel, manifest.version), manifest,
                          payload_of);
}

Status WriteDeltaFileAt(const fs::path& path, const Manifest& manifest,
                        const PayloadOf& payload_of) {
  if (!manifest.delta.has_value()) return InvalidArgument("version has no delta table");
  const DeltaInfo& d = *manifest.delta;
  if (d.chunks.size() != manifest.chunk_count()) {
    return InvalidArgument("delta table has " + std::to_string(d.chunks.size()) +
                           " chunks, the manifest " + std::to_string(manifest.chunk_count()));
  }
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return IoError("mkdir " + path.parent_path().string() + ": " + ec.message());
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open(" + tmp.string() + ")", errno);
  auto fail = [&](Status s) {
    ::close(fd);
    fs::remove(tmp, ec);
    return s;
  };
  const std::vector<uint8_t> header = Header(manifest, PayloadTotal(d));
  if (Status s = WriteAll(fd, header, tmp.string()); !s.ok()) return fail(s);
  for (uint32_t i = 0; i < d.chunks.size(); ++i) {
    const DeltaChunk& c = d.chunks[i];
    if (c.encoding == ChunkEncoding::kSame) continue;
    const std::span<const uint8_t> p = payload_of(ChunkIndex(i));
    if (p.size() != c.payload_size) {
      return fail(InvalidArgument("payload of chunk " + std::to_string(i) + " has " +
                                  std::to_string(p.size()) + " bytes, the delta table lists " +
                                  std::to_string(c.payload_size)));
    }
    if (Status s = WriteAll(fd, p, tmp.string()); !s.ok()) return fail(s);
  }
  if (::close(fd) != 0) {
    fs::remove(tmp, ec);
    return ErrnoStatus("close(" + tmp.string() + ")", errno);
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return IoError("rename " + tmp.string() + ": " + ec.message());
  }
  return Status::Ok();
}

Result<std::vector<uint64_t>> CheckDeltaFileBytes(std::span<const uint8_t> b,
                                                  const Manifest& manifest, std::string_view name) {
  if (!manifest.delta.has_value()) return NotFound("version has no delta table");
  const DeltaInfo& d = *manifest.delta;
  const uint64_t total = PayloadTotal(d);
  const std::string what(name);
  if (b.size() < kHeaderSize || std::memcmp(b.data(), kMagic, 4) != 0 ||
      Get(b.data() + 4, 4) != kFormat) {
    return Corrupt(what + ": not a weightcast delta file");
  }
  const std::vector<uint8_t> want = Header(manifest, total);
  if (!std::equal(want.begin(), want.end(), b.begin())) {
    return Corrupt(what + ": belongs to another version (header differs from v" +
                   std::to_string(manifest.version.value()) + "'s manifest)");
  }
  if (b.size() - kHeaderSize != total) {
    return Corrupt(what + ": " + std::to_string(b.size()) + " bytes, expected " +
                   std::to_string(kHeaderSize) + " + " + std::to_string(total));
  }
  std::vector<uint64_t> offsets(d.chunks.size());
  uint64_t at = kHeaderSize;
  for (size_t i = 0; i < d.chunks.size(); ++i) {
    offsets[i] = at;
    at += d.chunks[i].payload_size;
  }
  return offsets;
}

Result<DeltaFile> DeltaFile::Open(const fs::path& store_root, const Manifest& manifest) {
  return OpenAt(DeltaFilePath(store_root, manifest.channel, manifest.version), manifest);
}

Result<DeltaFile> DeltaFile::OpenAt(const fs::path& path, const Manifest& manifest) {
  if (!manifest.delta.has_value()) return NotFound("version has no delta table");
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound("no delta file " + path.string());
  DeltaFile out;
  WC_ASSIGN_OR_RETURN(out.file_, MappedFile::Open(path));
  WC_ASSIGN_OR_RETURN(out.offsets_,
                      CheckDeltaFileBytes(out.file_.bytes(), manifest, path.string()));
  return out;
}

Result<std::span<const uint8_t>> DeltaFile::Payload(const Manifest& manifest,
                                                    ChunkIndex index) const {
  const uint32_t i = index.value();
  if (!manifest.delta.has_value() || i >= offsets_.size()) {
    return InvalidArgument("no chunk " + std::to_string(i) + " in the delta");
  }
  const DeltaChunk& c = manifest.delta->chunks[i];
  const std::span<const uint8_t> p = file_.bytes().subspan(offsets_[i], c.payload_size);
  if (c.encoding == ChunkEncoding::kSame) return p;
  if (HashBytes(manifest.delta->payload_hash_algorithm, p) != c.payload_hash) {
    return Corrupt("delta file " + file_.path().string() + ": payload of chunk " +
                   std::to_string(i) + " does not match the manifest's payload hash");
  }
  return p;
}

void CollectDeltaFiles(const fs::path& store_root, std::string_view channel,
                       const std::vector<Version>& keep) {
  const fs::path dir = store_root / ".live" / std::string(channel);
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string stem = name.substr(0, name.find('.'));
    const std::optional<Version> v = store::ParseVersionName(stem);
    bool kept = false;
    for (Version k : keep) kept = kept || (v.has_value() && *v == k);
    if (!kept) fs::remove(it->path(), ec);
  }
}

}  // namespace weightcast::live
