// Strong types for the ids and indices that flow through weightcast, so that passing a chunk
// index where a version is expected does not compile.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace weightcast {

template <typename Tag, typename Rep>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  Rep value_{};
};

// Index of a chunk in a snapshot's flat byte space (0-based).
using ChunkIndex = StrongId<struct ChunkIndexTag, uint32_t>;
// Version number within a channel (1, 2, 3, ...; 0 means "none").
using Version = StrongId<struct VersionTag, uint64_t>;
// A node of the fleet (agent, publisher, coordinator).
using PeerId = StrongId<struct PeerIdTag, uint64_t>;
// Offset into a snapshot's flat byte space.
using ByteOffset = StrongId<struct ByteOffsetTag, uint64_t>;

}  // namespace weightcast

template <typename Tag, typename Rep>
struct std::hash<weightcast::StrongId<Tag, Rep>> {
  size_t operator()(const weightcast::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
