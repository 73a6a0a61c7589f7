#include "manifest/part_assembly.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>
#include <utility>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast {
namespace {

// Metadata keys the assembly writes or reads itself: never compared between parts, never
// copied from a part into the assembled manifest.
bool AssemblyKey(std::string_view key) {
  return key == kPartKey || key == kPartSlicesKey || key == kPartsKey ||
         key.starts_with(kSlicesKey);
}
// Metadata every rank sets to its own value (where it published from): rank 0's is kept, the
// others are not compared.
bool PerRankKey(std::string_view key) { return key.starts_with("weightcast."); }

std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

std::string Rank(uint32_t rank) { return "rank " + std::to_string(rank); }

std::string V(Version v) { return "v" + std::to_string(v.value()); }

// The value of a manifest's slice lines: one key, or kSlicesKey split into numbered keys.
std::string SliceLines(const Manifest& manifest, std::string_view key) {
  std::string out;
  auto it = manifest.metadata.find(std::string(key));
  if (it == manifest.metadata.end()) return out;
  out = it->second;
  if (key != kSlicesKey) return out;
  for (uint32_t i = 1;; ++i) {
    auto more = manifest.metadata.find(std::string(key) + "." + std::to_string(i));
    if (more == manifest.metadata.end()) return out;
    out += more->second;
  }
}

// One string from pieces, for messages built inside loops (no temporaries per piece).
template <typename... Pieces>
std::string Cat(const Pieces&... pieces) {
  std::string out;
  (out.append(std::string_view(pieces)), ...);
  return out;
}

// Messages built outside the loops that find the problem (one allocation chain per error).
Status MalformedLine(std::string_view key, std::string_view line, std::string_view expected) {
  return Corrupt(std::string(key) + ": malformed line '" + std::string(line.substr(0, 120)) + "'" +
                 std::string(expected));
}

Status MetadataConflict(const std::string& who, const std::string& key, const std::string& value,
                        uint32_t rank, const std::string& theirs) {
  return FailedPrecondition(who + ": " + key + " is '" + value.substr(0, 64) + "' but " +
                            Rank(rank) + " gave '" + theirs.substr(0, 64) +
                            "' for the same version; ranks at different steps are not one version");
}

Status TensorClash(const std::string& who, const std::string& name, uint32_t rank) {
  return FailedPrecondition(who + ": tensor " + name.substr(0, 200) + " is also in " + Rank(rank) +
                            "'s part; a slice of a tensor needs a name of its own");
}

void AppendField(std::string& out, std::string_view field, char end) {
  out.append(field);
  out.push_back(end);
}

}  // namespace

Result<std::optional<PartId>> PartOf(const Manifest& manifest) {
  auto it = manifest.metadata.find(std::string(kPartKey));
  if (it == manifest.metadata.end()) return std::optional<PartId>();
  const std::vector<std::string_view> fields = Split(it->second, '/');
  PartId part;
  if (fields.size() != 2 || !ParseNumber(fields[0], &part.rank) ||
      !ParseNumber(fields[1], &part.world) || part.world < 2 || part.world > kMaxWorld ||
      part.rank >= part.world) {
    return InvalidArgument(
        std::string(kPartKey) + " is '" + it->second.substr(0, 64) +
        "': must be R/W with 0 <= R < W and 2 <= W <= " + std::to_string(kMaxWorld));
  }
  return std::optional<PartId>(part);
}

std::string PartValue(PartId part) {
  return std::to_string(part.rank) + "/" + std::to_string(part.world);
}

std::string PartDirectory(PartId part) {
  char name[64];
  std::snprintf(name, sizeof(name), "rank-%05u-of-%05u", part.rank, part.world);
  return name;
}

Result<std::vector<PartLayout>> PartsOf(const Manifest& assembled) {
  std::vector<PartLayout> out;
  auto it = assembled.metadata.find(std::string(kPartsKey));
  if (it == assembled.metadata.end()) return out;
  uint64_t next_offset = 0;
  uint32_t next_chunk = 0;
  for (std::string_view line : Split(it->second, '\n')) {
    if (line.empty()) continue;
    const std::vector<std::string_view> f = Split(line, '\t');
    PartLayout p;
    Result<std::vector<uint8_t>> root = f.size() == 6 ? FromHex(f[5]) : InvalidArgument("");
    if (f.size() != 6 || !ParseNumber(f[0], &p.rank) || !ParseNumber(f[1], &p.first_chunk) ||
        !ParseNumber(f[2], &p.chunk_count) || !ParseNumber(f[3], &p.offset) ||
        !ParseNumber(f[4], &p.size) || !root.ok() || root->size() != p.root.size()) {
      return MalformedLine(kPartsKey, line, "");
    }
    std::copy(root->begin(), root->end(), p.root.begin());
    if (p.rank != out.size() || p.offset != next_offset || p.first_chunk != next_chunk) {
      return MalformedLine(kPartsKey, line, " (out of order or not contiguous)");
    }
    next_offset = p.offset + p.size;
    next_chunk = p.first_chunk + p.chunk_count;
    out.push_back(p);
  }
  if (next_offset != assembled.total_size() || next_chunk != assembled.chunk_count()) {
    return Corrupt(std::string(kPartsKey) + ": the parts do not cover the version");
  }
  return out;
}

Result<std::vector<TensorSlice>> SlicesOf(const Manifest& manifest, std::string_view key) {
  std::vector<TensorSlice> out;
  const std::string text = SliceLines(manifest, key);
  for (std::string_view line : Split(text, '\n')) {
    if (line.empty()) continue;
    const std::vector<std::string_view> f = Split(line, '\t');
    TensorSlice s;
    if (f.size() != 6 || f[0].empty() || f[2].empty() || !ParseNumber(f[1], &s.dim) ||
        !ParseNumber(f[3], &s.start) || !ParseNumber(f[4], &s.length) ||
        !ParseNumber(f[5], &s.extent) || s.start > s.extent || s.length > s.extent - s.start) {
      return MalformedLine(key, line, " (whole, dim, slice, start, length, extent)");
    }
    s.whole = std::string(f[0]);
    s.slice = std::string(f[2]);
    out.push_back(std::move(s));
  }
  return out;
}

std::string SlicesText(const std::vector<TensorSlice>& slices) {
  std::string out;
  for (const TensorSlice& s : slices) {
    AppendField(out, s.whole, '\t');
    AppendField(out, std::to_string(s.dim), '\t');
    AppendField(out, s.slice, '\t');
    AppendField(out, std::to_string(s.start), '\t');
    AppendField(out, std::to_string(s.length), '\t');
    AppendField(out, std::to_string(s.extent), '\n');
  }
  return out;
}

PartAssembly::PartAssembly(std::string channel, Version version, uint32_t world,
                           PartDeadline deadline)
    : channel_(std::move(channel)), version_(version), world_(world), deadline_(deadline) {}

const Manifest* PartAssembly::Part(uint32_t rank) const {
  auto it = parts_.find(rank);
  return it == parts_.end() ? nullptr : &it->second;
}

std::vector<uint32_t> PartAssembly::Missing() const {
  std::vector<uint32_t> out;
  for (uint32_t r = 0; r < world_; ++r) {
    if (!parts_.contains(r)) out.push_back(r);
  }
  return out;
}

std::string PartAssembly::ExpiredReason(std::string_view timeout_text) const {
  std::string ranks;
  for (uint32_t r : Missing()) {
    if (!ranks.empty()) ranks += ", ";
    ranks += std::to_string(r);
  }
  return "sharded " + V(version_) + ": the parts of ranks " + ranks + " did not arrive within " +
         std::string(timeout_text) + " of the first (" + std::to_string(parts_in()) + " of " +
         std::to_string(world_) + " in)";
}

Result<PartAssembly::Added> PartAssembly::Add(PartId part, const Manifest& manifest,
                                              std::span<const uint8_t> signed_bytes) {
  const std::string who = Rank(part.rank) + "'s part of " + channel_ + " " + V(version_);
  if (manifest.channel != channel_ || manifest.version != version_) {
    return InvalidArgument(who + ": the manifest is " + manifest.channel + " " +
                           V(manifest.version));
  }
  if (part.world != world_ || part.rank >= world_) {
    return InvalidArgument(who + ": it says " + PartValue(part) + " but " + V(version_) +
                           " is being assembled from " + std::to_string(world_) + " ranks");
  }
  if (const Manifest* held = Part(part.rank); held != nullptr) {
    if (held->root == manifest.root) return Added::kDuplicate;
    return AlreadyExists(who + ": this rank already gave a part with another root (" +
                         ToHex(held->root).substr(0, 16) + "..., now " +
                         ToHex(manifest.root).substr(0, 16) + "...); a rank gives one part");
  }
  if (!parts_.empty()) {
    const Manifest& first = parts_.begin()->second;
    const uint32_t first_rank = parts_.begin()->first;
    if (manifest.chunk_size != first.chunk_size) {
      return InvalidArgument(who + ": chunk size " + std::to_string(manifest.chunk_size) +
                             " where " + Rank(first_rank) + " cut its part into " +
                             std::to_string(first.chunk_size) +
                             "; every rank needs the same --chunk-size");
    }
    if (manifest.hash_algorithm != first.hash_algorithm ||
        manifest.has_fast_hashes() != first.has_fast_hashes()) {
      return InvalidArgument(who + ": another hash algorithm than " + Rank(first_rank) + "'s");
    }
    if (manifest.has_device_checks() != first.has_device_checks()) {
      return InvalidArgument(
          who +
          (manifest.has_device_checks() ? ": device checks where " : ": no device checks where ") +
          Rank(first_rank) + (first.has_device_checks() ? " has them" : " has none") +
          "; every rank needs the same --device-checks");
    }
  }
  if (part.rank + 1 != world_ && manifest.total_size() % manifest.chunk_size != 0) {
    return InvalidArgument(who + ": " + std::to_string(manifest.total_size()) +
                           " bytes, not a whole number of " + std::to_string(manifest.chunk_size) +
                           "-byte chunks (every part but the last must be padded to one)");
  }
  // Conflicts: the version can never be assembled. The step (and any other metadata a trainer
  // sets) must be the same on every rank: ranks at different steps are not one version.
  for (const auto& [rank, other] : parts_) {
    for (const auto& [key, value] : manifest.metadata) {
      if (AssemblyKey(key) || PerRankKey(key)) continue;
      auto it = other.metadata.find(key);
      if (it != other.metadata.end() && it->second != value) {
        return MetadataConflict(who, key, value, rank, it->second);
      }
    }
  }
  for (const ManifestTensor& t : manifest.tensors) {
    auto it = tensor_owner_.find(t.name);
    if (it != tensor_owner_.end()) return TensorClash(who, t.name, it->second);
  }
  for (const ManifestTensor& t : manifest.tensors) tensor_owner_[t.name] = part.rank;
  parts_.emplace(part.rank, manifest);
  signed_parts_[part.rank].assign(signed_bytes.begin(), signed_bytes.end());
  return Added::kNew;
}

namespace {

// Checks that the slices of each whole tensor tile it exactly and agree with the tensors that
// hold them, and that no whole shadows a tensor of the version.
Status CheckSlices(std::vector<TensorSlice>& slices, const Manifest& assembled) {
  std::map<std::string_view, const ManifestTensor*> by_name;
  for (const ManifestTensor& t : assembled.tensors) by_name[t.name] = &t;
  std::sort(slices.begin(), slices.end(), [](const TensorSlice& a, const TensorSlice& b) {
    return std::tie(a.whole, a.start) < std::tie(b.whole, b.start);
  });
  std::set<std::string_view> used;
  for (size_t i = 0; i < slices.size();) {
    const TensorSlice head = slices[i];
    const std::string whole = head.whole.substr(0, 200);
    if (by_name.contains(head.whole)) {
      return FailedPrecondition(Cat("whole tensor ", whole, " has the name of a tensor"));
    }
    uint64_t next = 0;
    const ManifestTensor* first = nullptr;
    for (; i < slices.size() && slices[i].whole == head.whole; ++i) {
      const TensorSlice& s = slices[i];
      const std::string slice = s.slice.substr(0, 200);
      auto it = by_name.find(s.slice);
      if (it == by_name.end() || !used.insert(s.slice).second) {
        return FailedPrecondition(
            Cat("slice ", slice, " of ", whole, " is not a tensor of any part, or is named twice"));
      }
      const ManifestTensor& t = *it->second;
      if (s.dim != head.dim || s.extent != head.extent || s.dim >= t.shape.size() ||
          t.shape[s.dim] != s.length) {
        return FailedPrecondition(Cat("slice ", slice, " of ", whole, ": dim ",
                                      std::to_string(s.dim), ", length ", std::to_string(s.length),
                                      " or extent disagree with its shape or the other slices"));
      }
      if (first == nullptr) first = &t;
      std::vector<uint64_t> a = t.shape, b = first->shape;
      if (a.size() == b.size()) a[s.dim] = b[s.dim] = 0;
      if (t.dtype != first->dtype || a != b) {
        return FailedPrecondition(
            Cat("the slices of ", whole, " disagree in dtype or the other dimensions"));
      }
      if (s.start != next) {
        return FailedPrecondition(Cat("the slices of ", whole, " along dim ", std::to_string(s.dim),
                                      " leave a gap or overlap at ",
                                      std::to_string(std::min(s.start, next))));
      }
      next = s.start + s.length;
    }
    if (next != head.extent) {
      return FailedPrecondition(Cat("the slices of ", whole, " cover ", std::to_string(next),
                                    " of its ", std::to_string(head.extent), " along dim ",
                                    std::to_string(head.dim)));
    }
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::vector<uint8_t>> PartAssembly::SignedParts() const {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [rank, bytes] : signed_parts_) out.push_back(bytes);
  return out;
}

Result<Manifest> PartAssembly::Assemble(const Manifest* base, std::string* why_full) const {
  if (!complete()) {
    return FailedPrecondition(V(version_) + ": " + std::to_string(parts_in()) + " of " +
                              std::to_string(world_) + " parts in");
  }
  const Manifest& first = parts_.begin()->second;
  Manifest out;
  out.channel = channel_;
  out.version = version_;
  out.hash_algorithm = first.hash_algorithm;
  out.chunk_size = first.chunk_size;
  std::string table;
  std::vector<TensorSlice> slices;
  std::vector<PartLayout> layouts;
  uint64_t offset = 0;
  for (const auto& [rank, part] : parts_) {
    std::string dir = PartDirectory({rank, world_});
    dir.push_back('/');
    const uint32_t files_before = static_cast<uint32_t>(out.files.size());
    for (ManifestFile f : part.files) {
      f.path.insert(0, dir);
      f.offset += offset;
      out.files.push_back(std::move(f));
    }
    for (ManifestTensor t : part.tensors) {
      t.offset += offset;
      t.file_index += files_before;
      out.tensors.push_back(std::move(t));
    }
    PartLayout layout{.rank = rank,
                      .first_chunk = out.chunk_count(),
                      .chunk_count = part.chunk_count(),
                      .offset = offset,
                      .size = part.total_size(),
                      .root = part.root};
    layouts.push_back(layout);
    out.chunk_hashes.insert(out.chunk_hashes.end(), part.chunk_hashes.begin(),
                            part.chunk_hashes.end());
    out.fast_hashes.insert(out.fast_hashes.end(), part.fast_hashes.begin(), part.fast_hashes.end());
    // A part ends on a chunk boundary, so its chunks' checks (weighted by the place in the
    // chunk) are the assembled version's.
    out.device_checks.insert(out.device_checks.end(), part.device_checks.begin(),
                             part.device_checks.end());
    for (const auto& [key, value] : part.metadata) {
      if (!AssemblyKey(key)) out.metadata.emplace(key, value);  // rank 0's wins for per-rank keys
    }
    WC_ASSIGN_OR_RETURN(std::vector<TensorSlice> own, SlicesOf(part, kPartSlicesKey));
    slices.insert(slices.end(), own.begin(), own.end());
    AppendField(table, std::to_string(rank), '\t');
    AppendField(table, std::to_string(layout.first_chunk), '\t');
    AppendField(table, std::to_string(layout.chunk_count), '\t');
    AppendField(table, std::to_string(layout.offset), '\t');
    AppendField(table, std::to_string(layout.size), '\t');
    AppendField(table, ToHex(part.root), '\n');
    offset += part.total_size();
  }
  if (table.size() > kMaxMetadataValueBytes) {
    return InvalidArgument(std::to_string(world_) + " parts: the part table is too long");
  }
  out.metadata[std::string(kPartsKey)] = table;
  if (!slices.empty()) {
    WC_RETURN_IF_ERROR(CheckSlices(slices, out));
    const std::string text = SlicesText(slices);
    // Split on line ends into values that fit.
    size_t at = 0;
    for (uint32_t i = 0; at < text.size(); ++i) {
      size_t end = std::min(text.size(), at + kMaxMetadataValueBytes);
      if (end < text.size()) end = text.rfind('\n', end - 1) + 1;
      if (end <= at) return InvalidArgument("a slice line is longer than a metadata value");
      out.metadata[std::string(kSlicesKey) + (i == 0 ? "" : "." + std::to_string(i))] =
          text.substr(at, end - at);
      at = end;
    }
  }

  // A delta when every part is one on the same rank's part of one assembled base, laid out
  // alike: then chunk i of the version pairs with chunk i of the base, as the agents decode it.
  std::string why;
  std::vector<PartLayout> base_parts;
  if (base != nullptr) {
    WC_ASSIGN_OR_RETURN(base_parts, PartsOf(*base));
  }
  DeltaInfo delta;
  for (const auto& [rank, part] : parts_) {
    const PartLayout& layout = layouts[rank];
    if (!part.delta.has_value()) {
      why = Cat(Rank(rank), "'s part is full");
    } else if (base == nullptr || part.delta->base_version != base->version) {
      why = Cat(Rank(rank), "'s part is a delta on ", V(part.delta->base_version),
                ", which is not an assembled version of ", std::to_string(world_), " parts here");
    } else if (base_parts.size() != world_) {
      why = Cat("the base ", V(base->version), " has ", std::to_string(base_parts.size()),
                " parts, not ", std::to_string(world_));
    } else if (base_parts[rank].root != part.delta->base_root) {
      why = Cat(Rank(rank), "'s part is a delta on another part than the base's ", Rank(rank));
    } else if (base_parts[rank].first_chunk != layout.first_chunk ||
               base_parts[rank].chunk_count != layout.chunk_count) {
      why = Cat(Rank(rank), "'s part moved or changed its chunk count since ", V(base->version));
    } else if (base->chunk_size != out.chunk_size) {
      why = "the base has another chunk size";
    } else if (!delta.chunks.empty() &&
               part.delta->payload_hash_algorithm != delta.payload_hash_algorithm) {
      why = "the parts hash their payloads differently";
    }
    if (!why.empty()) break;
    delta.payload_hash_algorithm = part.delta->payload_hash_algorithm;
    delta.chunks.insert(delta.chunks.end(), part.delta->chunks.begin(), part.delta->chunks.end());
  }
  if (why.empty()) {
    delta.base_version = base->version;
    delta.base_root = base->root;
    out.delta = std::move(delta);
  } else if (why_full != nullptr) {
    *why_full = why;
  }
  out.root = ComputeRoot(out);
  if (Status s = ValidateManifest(out); !s.ok()) {
    return InvalidArgument("the assembled " + V(version_) +
                           " is not a valid manifest: " + s.message());
  }
  return out;
}

}  // namespace weightcast
