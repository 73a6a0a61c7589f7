// Builds safetensors files byte by byte for the format tests, independent of the writer.
#pragma once

#include "testing/temp_dir.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

namespace weightcast::testing {

// 8-byte little-endian length, the header text, then `data_size` bytes of data (0..255 repeating).
inline std::vector<uint8_t> SafetensorsBytes(std::string_view header, uint64_t data_size) {
  std::vector<uint8_t> out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (uint64_t i = 0; i < data_size; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

// Same, with the length field set to `declared_length` whatever the header's real size.
inline std::vector<uint8_t> SafetensorsBytesWithLength(uint64_t declared_length,
                                                       std::string_view header,
                                                       uint64_t data_size) {
  std::vector<uint8_t> out = SafetensorsBytes(header, data_size);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(declared_length >> (8 * i));
  return out;
}

inline void WriteBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

inline void WriteText(const std::filesystem::path& path, std::string_view text) {
  WriteBytes(path, std::vector<uint8_t>(text.begin(), text.end()));
}

}  // namespace weightcast::testing
