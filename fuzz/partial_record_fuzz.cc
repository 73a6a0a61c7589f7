// The partial-version record (store/partial.h) on arbitrary bytes: it is read from a store's
// version directory, which a damaged disk or another tool may have changed. The parser must never
// crash; what it accepts must name only chunks and tensors of the manifest, chunks ascending, and
// survive a round trip.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "store/partial.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  static const Manifest manifest = [] {
    Manifest m;
    m.chunk_size = 100;
    m.files = {{"a.safetensors", 1000, 0}};
    m.tensors = {{"w#0", DType::kU8, {500}, 0, 8, 500}, {"w#500", DType::kU8, {400}, 0, 508, 400}};
    m.chunk_hashes.resize(10);
    return m;
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = ParsePartial(text, manifest);
  if (!parsed.ok()) return 0;
  for (size_t i = 0; i < parsed->chunks.size(); ++i) {
    if (parsed->chunks[i].value() >= manifest.chunk_count()) std::abort();
    if (i > 0 && !(parsed->chunks[i - 1] < parsed->chunks[i])) std::abort();
  }
  auto again = ParsePartial(SerializePartial(*parsed), manifest);
  if (!again.ok() || again->chunks != parsed->chunks || again->tensors != parsed->tensors ||
      again->patterns != parsed->patterns) {
    std::abort();
  }
  return 0;
}
