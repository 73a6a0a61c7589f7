#include "manifest/selection.h"

#include <gtest/gtest.h>

namespace weightcast {
namespace {

// A manifest laid out by hand: chunks of 100 bytes over two files.
//   a.safetensors [0, 400): header [0, 50), w#0 [50, 250), w#100 [250, 390), empty at 390
//   b/config.json [400, 430): no tensors
//   rank-00000-of-00002/~weightcast-pad [430, 600): padding, no tensors
//   z.safetensors [600, 1000): header [600, 610), other [610, 1000)
Manifest Layout() {
  Manifest m;
  m.channel = "policy";
  m.version = Version(1);
  m.chunk_size = 100;
  m.files = {{"a.safetensors", 400, 0},
             {"b/config.json", 30, 400},
             {"rank-00000-of-00002/~weightcast-pad", 170, 430},
             {"z.safetensors", 400, 600}};
  m.tensors = {{"w#0", DType::kU8, {200}, 0, 50, 200},
               {"w#100", DType::kU8, {140}, 0, 250, 140},
               {"empty", DType::kU8, {0}, 0, 390, 0},
               {"other", DType::kU8, {390}, 3, 610, 390}};
  m.chunk_hashes.resize(10);
  return m;
}

std::vector<uint32_t> Indices(const TensorSelection& s) {
  std::vector<uint32_t> out;
  for (ChunkIndex c : s.chunks) out.push_back(c.value());
  return out;
}

TEST(SelectTensors, NoPatternSelectsEverything) {
  const Manifest m = Layout();
  const TensorSelection s = SelectTensors(m, {});
  EXPECT_EQ(s.tensors, (std::vector<std::string>{"w#0", "w#100", "empty", "other"}));
  EXPECT_EQ(Indices(s).size(), 10u);
}

TEST(SelectTensors, TensorChunksAndEveryTensorFilesHeader) {
  const Manifest m = Layout();
  const std::vector<std::string> patterns = {"w#0*"};
  const TensorSelection s = SelectTensors(m, patterns);
  EXPECT_EQ(s.tensors, (std::vector<std::string>{"w#0"}));
  // w#0: chunks 0..2; a's header is in chunk 0, z's [600, 610) in chunk 6; config.json and
  // the padding (chunks 4..5) hold no tensor and are not wanted.
  EXPECT_EQ(Indices(s), (std::vector<uint32_t>{0, 1, 2, 6}));
}

TEST(SelectTensors, SeveralPatternsAndNoMatch) {
  const Manifest m = Layout();
  const std::vector<std::string> both = {"w#100", "oth?r"};
  const TensorSelection s = SelectTensors(m, both);
  EXPECT_EQ(s.tensors, (std::vector<std::string>{"w#100", "other"}));
  EXPECT_EQ(Indices(s), (std::vector<uint32_t>{0, 2, 3, 6, 7, 8, 9}));
  const std::vector<std::string> none = {"nothing*"};
  const TensorSelection n = SelectTensors(m, none);
  EXPECT_TRUE(n.tensors.empty());
  EXPECT_EQ(Indices(n), (std::vector<uint32_t>{0, 6}));  // the headers: the files still parse
}

TEST(ChunksOutsideTensors, HeadersGapsAndFilesWithoutTensors) {
  const Manifest m = Layout();
  std::vector<uint32_t> got;
  for (ChunkIndex c : ChunksOutsideTensors(m)) got.push_back(c.value());
  // a's header (chunk 0), the gap [390, 400) after w#100 (chunk 3), config.json and the padding
  // (chunks 4, 5), z's header (chunk 6); chunks 1, 2 and 7..9 are tensor bytes only.
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 3, 4, 5, 6}));
}

TEST(SelectTensors, AZeroSizeTensorIsSelectedWithoutChunks) {
  const Manifest m = Layout();
  const std::vector<std::string> patterns = {"empty"};
  const TensorSelection s = SelectTensors(m, patterns);
  EXPECT_EQ(s.tensors, (std::vector<std::string>{"empty"}));
  EXPECT_EQ(Indices(s), (std::vector<uint32_t>{0, 6}));
}

}  // namespace
}  // namespace weightcast
