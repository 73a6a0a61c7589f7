#include <array>
#include <limits>
#include <string>

#include "format/safetensors.h"

namespace weightcast {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  uint32_t bits;
};

// Indexed by the enum value; the static_assert below keeps the two in step.
constexpr std::array<DTypeEntry, 19> kDTypes = {{
    {DType::kBool, "BOOL", 8},       {DType::kU8, "U8", 8},
    {DType::kI8, "I8", 8},           {DType::kU16, "U16", 16},
    {DType::kI16, "I16", 16},        {DType::kU32, "U32", 32},
    {DType::kI32, "I32", 32},        {DType::kU64, "U64", 64},
    {DType::kI64, "I64", 64},        {DType::kF16, "F16", 16},
    {DType::kBF16, "BF16", 16},      {DType::kF32, "F32", 32},
    {DType::kF64, "F64", 64},        {DType::kF8_E4M3, "F8_E4M3", 8},
    {DType::kF8_E5M2, "F8_E5M2", 8}, {DType::kF8_E8M0, "F8_E8M0", 8},
    {DType::kF6_E2M3, "F6_E2M3", 6}, {DType::kF6_E3M2, "F6_E3M2", 6},
    {DType::kF4, "F4", 4},
}};

constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  }
  return static_cast<size_t>(DType::kF4) + 1 == kDTypes.size();
}
static_assert(TableMatchesEnum(), "kDTypes must list every DType in enum order");

const DTypeEntry& Entry(DType dtype) {
  size_t index = static_cast<size_t>(dtype);
  // An out-of-range enum value can only come from a cast bug; map it to U8 rather than read past
  // the table.
  return index < kDTypes.size() ? kDTypes[index] : kDTypes[1];
}

}  // namespace

std::string_view DTypeName(DType dtype) { return Entry(dtype).name; }

uint32_t DTypeBits(DType dtype) { return Entry(dtype).bits; }

Result<DType> ParseDType(std::string_view name) {
  for (const DTypeEntry& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
  }
  return InvalidArgument("unknown dtype \"" + std::string(name) + "\"");
}

Result<uint64_t> TensorByteSize(DType dtype, std::span<const uint64_t> shape) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  uint64_t elements = 1;
  for (uint64_t dim : shape) {
    if (dim != 0 && elements > kMax / dim) {
      return OutOfRange("shape product overflows 64 bits");
    }
    elements *= dim;
  }
  const uint64_t bits = DTypeBits(dtype);
  if (elements > kMax / bits) return OutOfRange("tensor size in bits overflows 64 bits");
  const uint64_t total_bits = elements * bits;
  if (total_bits % 8 != 0) {
    return InvalidArgument(std::to_string(elements) + " elements of " +
                           std::string(DTypeName(dtype)) + " are " + std::to_string(total_bits) +
                           " bits, not a whole number of bytes");
  }
  return total_bits / 8;
}

}  // namespace weightcast
