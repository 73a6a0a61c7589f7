// HeldBytes: bytes that stay at the same address, unchanged, while their owner is held.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace weightcast {

// A view of bytes and what keeps them alive: a store's mapping, a received frame, a payload in a
// cache, a buffer a chunk was gathered into. The one type the layers hand bytes on with, so a
// chunk or payload travels from where it lies to a transport (net::OutFrame::Chunk takes
// `owner` as its keep_alive) without being copied on the way.
struct HeldBytes {
  std::span<const uint8_t> bytes;
  std::shared_ptr<const void> owner;

  // The whole of a shared buffer, owned by it.
  static HeldBytes Of(std::shared_ptr<const std::vector<uint8_t>> buffer) {
    const std::span<const uint8_t> view(*buffer);
    return {view, std::move(buffer)};
  }
};

}  // namespace weightcast
