// Synth tests use the shared temporary directory of tests/testing.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "testing/temp_dir.h"
#include "util/file.h"

namespace weightcast::synth {

using TempDir = ::weightcast::testing::TempDir;

inline std::string ReadAll(const std::filesystem::path& p) {
  auto s = ReadFileToString(p);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : "";
}

}  // namespace weightcast::synth
