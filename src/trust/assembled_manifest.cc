#include "trust/assembled_manifest.h"

#include <algorithm>
#include <optional>
#include <string>

#include "manifest/builder.h"
#include "manifest/part_assembly.h"
#include "trust/signed_manifest.h"

namespace weightcast {
namespace {

constexpr std::string_view kMagic = "WCSM";
constexpr uint8_t kPartFormat = 2;  // a rank's certificate-signed manifest

void PutU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(std::vector<uint8_t>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// Bounds-checked reads from the front of `bytes`.
struct Reader {
  std::span<const uint8_t> bytes;
  bool Take(size_t n, std::span<const uint8_t>& out) {
    if (bytes.size() < n) return false;
    out = bytes.first(n);
    bytes = bytes.subspan(n);
    return true;
  }
  bool U32(uint32_t& v) {
    std::span<const uint8_t> b;
    if (!Take(4, b)) return false;
    v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(b[i]) << (8 * i);
    return true;
  }
  bool U64(uint64_t& v) {
    std::span<const uint8_t> b;
    if (!Take(8, b)) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
    return true;
  }
};

}  // namespace

std::vector<uint8_t> JoinAssembledManifest(std::span<const std::vector<uint8_t>> parts,
                                           uint64_t base_version, const Digest& base_root) {
  std::vector<uint8_t> out(kMagic.begin(), kMagic.end());
  out.push_back(kAssembledManifestFormat);
  PutU32(out, static_cast<uint32_t>(parts.size()));
  for (const std::vector<uint8_t>& part : parts) {
    PutU32(out, static_cast<uint32_t>(part.size()));
    out.insert(out.end(), part.begin(), part.end());
  }
  PutU64(out, base_version);
  out.insert(out.end(), base_root.begin(), base_root.end());
  return out;
}

Result<Manifest> VerifyAssembledManifest(std::span<const uint8_t> bytes,
                                         const trust::TrustAnchor& anchor) {
  Reader in{bytes};
  std::span<const uint8_t> header;
  uint32_t world = 0;
  if (!in.Take(kMagic.size() + 1, header) ||
      !std::equal(kMagic.begin(), kMagic.end(), header.begin()) ||
      header[kMagic.size()] != kAssembledManifestFormat || !in.U32(world)) {
    return Corrupt("assembled manifest: bad header");
  }
  if (world < 2 || world > kMaxWorld) {
    return Corrupt("assembled manifest: " + std::to_string(world) + " parts");
  }
  std::optional<PartAssembly> assembly;
  for (uint32_t rank = 0; rank < world; ++rank) {
    const std::string what = "assembled manifest: rank " + std::to_string(rank) + "'s part";
    uint32_t size = 0;
    std::span<const uint8_t> signed_part;
    if (!in.U32(size) || size > kMaxManifestBytes + 4096 || !in.Take(size, signed_part)) {
      return Corrupt(what + " runs past the envelope");
    }
    if (signed_part.size() < 5 || signed_part[4] != kPartFormat) {
      return Corrupt(what + " is not a publisher's certified manifest");
    }
    Result<Manifest> part = VerifySignedManifest(signed_part, {"", &anchor});
    if (!part.ok()) return part.status().WithContext(what);
    Result<std::optional<PartId>> id = PartOf(*part);
    if (!id.ok() || !id->has_value() || (*id)->rank != rank || (*id)->world != world) {
      return Corrupt(what + " is not part " + std::to_string(rank) + "/" + std::to_string(world));
    }
    if (!assembly.has_value())
      assembly.emplace(part->channel, part->version, world, PartDeadline{});
    Result<PartAssembly::Added> added = assembly->Add(**id, *part);
    if (!added.ok() || *added != PartAssembly::Added::kNew) {
      return Corrupt(what + " does not belong with the others: " +
                     (added.ok() ? std::string("a second copy") : added.status().message()));
    }
  }
  uint64_t base_version = 0;
  std::span<const uint8_t> base_root;
  if (!in.U64(base_version) || !in.Take(sizeof(Digest), base_root) || !in.bytes.empty()) {
    return Corrupt("assembled manifest: a bad end (base version and root)");
  }
  Result<Manifest> assembled = assembly->Assemble(nullptr);
  if (!assembled.ok()) return Corrupt("assembled manifest: " + assembled.status().message());
  if (base_version == 0) return assembled;
  // A delta on the base the coordinator paired the parts with: the parts' deltas, in rank order.
  DeltaInfo delta;
  delta.base_version = Version(base_version);
  std::copy(base_root.begin(), base_root.end(), delta.base_root.begin());
  for (uint32_t rank = 0; rank < world; ++rank) {
    const Manifest& part = *assembly->Part(rank);
    if (!part.delta.has_value() ||
        (rank > 0 && part.delta->payload_hash_algorithm != delta.payload_hash_algorithm)) {
      return Corrupt("assembled manifest: a delta on v" + std::to_string(base_version) +
                     ", but rank " + std::to_string(rank) + "'s part is " +
                     (part.delta.has_value() ? "hashed otherwise" : "full"));
    }
    delta.payload_hash_algorithm = part.delta->payload_hash_algorithm;
    delta.chunks.insert(delta.chunks.end(), part.delta->chunks.begin(), part.delta->chunks.end());
  }
  assembled->delta = std::move(delta);
  if (Status valid = ValidateManifest(*assembled); !valid.ok()) {
    return Corrupt("assembled manifest: " + valid.message());
  }
  return assembled;
}

}  // namespace weightcast
