// Feeds arbitrary bytes to the safetensors header parser as a whole file. Besides not crashing or
// reading out of bounds, an accepted header must satisfy the layout invariant the rest of
// weightcast relies on: tensors sorted by begin tile the data section up to the file's end.
//
// Each input is tried twice: as a whole file, and as header text wrapped in a correct length
// field plus a data section whose size is given by the last input byte, so that mutations spend
// their time inside the JSON rather than on a length that rarely matches.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "format/safetensors.h"

namespace {

using namespace weightcast;

void CheckFile(std::span<const uint8_t> bytes) {
  const uint64_t size = bytes.size();
  Result<SafetensorsHeader> header = ParseSafetensorsHeader(bytes, size, "fuzz.safetensors");
  if (!header.ok()) {
    if (header.status().message().empty()) std::abort();
    return;
  }
  uint64_t covered = 0;
  for (const TensorInfo& t : header->tensors) {
    if (t.begin != covered || t.end < t.begin) std::abort();
    Result<uint64_t> expected = TensorByteSize(t.dtype, t.shape);
    if (!expected.ok() || *expected != t.byte_size()) std::abort();
    covered = t.end;
  }
  if (header->data_offset() + covered != size) std::abort();
  // A file that claims to be larger than the bytes given must not be read past them.
  ParseSafetensorsHeader(bytes, size + 4096, "fuzz.safetensors").status().IgnoreError();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckFile({data, size});
  if (size == 0) return 0;
  const size_t header_size = size - 1;
  const size_t data_size = data[size - 1];
  std::vector<uint8_t> file(8 + header_size + data_size, 0);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(uint64_t{header_size} >> (8 * i));
  std::copy(data, data + header_size, file.begin() + 8);
  CheckFile(file);
  return 0;
}
