// Fuzzes the parser of UCX message heads (net/ucx_message.h), the bytes a UCX peer chooses
// beyond the frame header: any header with any claimed data length must parse to a head whose
// sizes add up, or to a clean error.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "net/ucx_message.h"

using weightcast::net::kFrameHeaderSize;
using weightcast::net::ParseUcxMessageHead;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t data_length = 0;
  std::memcpy(&data_length, data, 4);
  std::span<const uint8_t> header(data + 4, size - 4);
  auto head = ParseUcxMessageHead(header, data_length, 1u << 20);
  if (!head.ok()) return 0;
  if (head->frame.length != head->body_prefix.size() + data_length) __builtin_trap();
  if (head->frame.length > (1u << 20)) __builtin_trap();
  if (head->body_prefix.data() + head->body_prefix.size() > header.data() + header.size()) {
    __builtin_trap();
  }
  (void)kFrameHeaderSize;
  return 0;
}
