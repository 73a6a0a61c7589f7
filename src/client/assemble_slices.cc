#include "client/assemble_slices.h"

#include <cstring>
#include <string>

namespace weightcast::client {

Result<std::vector<uint8_t>> ConcatAlong(uint32_t dim, std::span<const TensorView> slices) {
  if (slices.empty()) return InvalidArgument("no slices to assemble");
  const TensorView& first = slices.front();
  if (dim >= first.shape.size()) {
    return InvalidArgument("slice " + first.name + " has no dimension " + std::to_string(dim));
  }
  WC_ASSIGN_OR_RETURN(const uint32_t bits, DTypeBitWidth(first.dtype));
  // Elements before `dim` (rows of the cut) and after it (one index along `dim`).
  uint64_t outer = 1;
  for (uint32_t d = 0; d < dim; ++d) outer *= first.shape[d];
  uint64_t inner = 1;
  for (size_t d = dim + 1; d < first.shape.size(); ++d) inner *= first.shape[d];
  std::vector<uint64_t> row_bytes;
  uint64_t total = 0;
  for (const TensorView& s : slices) {
    bool same = s.dtype == first.dtype && s.shape.size() == first.shape.size();
    for (size_t d = 0; same && d < s.shape.size(); ++d) {
      same = d == dim || s.shape[d] == first.shape[d];
    }
    if (!same) {
      return InvalidArgument("slice " + s.name + " does not fit beside " + first.name +
                             " along dimension " + std::to_string(dim));
    }
    const uint64_t row_bits = s.shape[dim] * inner * bits;
    if (row_bits % 8 != 0) {
      return InvalidArgument("slice " + s.name + ": its rows do not end on a byte (" + s.dtype +
                             ")");
    }
    if (outer * (row_bits / 8) != s.bytes.size()) {
      return InvalidArgument("slice " + s.name + " holds " + std::to_string(s.bytes.size()) +
                             " bytes, its shape says " + std::to_string(outer * (row_bits / 8)));
    }
    row_bytes.push_back(row_bits / 8);
    total += s.bytes.size();
  }
  std::vector<uint8_t> out(total);
  uint8_t* to = out.data();
  for (uint64_t row = 0; row < outer; ++row) {
    for (size_t i = 0; i < slices.size(); ++i) {
      if (row_bytes[i] == 0) continue;
      std::memcpy(to, slices[i].bytes.data() + row * row_bytes[i], row_bytes[i]);
      to += row_bytes[i];
    }
  }
  return out;
}

}  // namespace weightcast::client
