#include "manifest/chunk_size.h"

#include <string>

#include "manifest/builder.h"
#include "util/text.h"

namespace weightcast {

uint64_t ResolveChunkSize(uint64_t requested, uint64_t total_bytes, const Manifest* current) {
  if (requested != kAutoChunkSize) return requested;
  if (current != nullptr && current->chunk_size != 0) return current->chunk_size;
  return ChooseChunkSize(total_bytes);
}

Result<uint64_t> ParseChunkSize(std::string_view text) {
  if (text == "auto") return kAutoChunkSize;
  Result<uint64_t> size = ParseSize(text);
  if (!size.ok() || *size < kMinChunkSize || *size > kMaxChunkSize) {
    return InvalidArgument("chunk size " + std::string(text) + ": must be auto or between " +
                           FormatBytes(kMinChunkSize) + " and " + FormatBytes(kMaxChunkSize));
  }
  return *size;
}

uint64_t ChooseChunkSize(uint64_t total_bytes) {
  uint64_t c = kAutoChunkMin;
  while (c < kAutoChunkMax && total_bytes / c > kAutoChunkTarget) c <<= 1;
  // total_bytes / c can exceed the target by a remainder: a 1 GiB + 1 B version still gets
  // 128 KiB chunks (8,193 of them) rather than flipping to 256 KiB on one byte.
  return c;
}

}  // namespace weightcast
