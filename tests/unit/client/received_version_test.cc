// ReceivedVersion on versions a store holds: whole tensors assembled from a sharded publish's
// slices, and a tensor-subset agent's partial version (only its tensors offered).
#include <weightcast/subscriber.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "client/tensor_writer.h"
#include "format/safetensors.h"
#include "hash/digest.h"
#include "manifest/builder.h"
#include "manifest/part_assembly.h"
#include "store/store.h"
#include "testing/temp_dir.h"

namespace weightcast {
namespace {

using ::weightcast::testing::TempDir;
using namespace std::chrono_literals;

constexpr char kChannel[] = "policy";

// Two ranks' files: rows [0, 2) and [2, 4) of a 4x3 U8 tensor `w` as slices w#0 and w#2.
Manifest WriteSlices(const std::filesystem::path& dir, Version version) {
  std::filesystem::create_directories(dir);
  const std::vector<uint8_t> top = {1, 2, 3, 4, 5, 6}, bottom = {7, 8, 9, 10, 11, 12};
  EXPECT_TRUE(
      client::WriteTensorsFile(dir / "a.safetensors", {{"w#0", DType::kU8, {2, 3}, top}}).ok());
  EXPECT_TRUE(
      client::WriteTensorsFile(dir / "b.safetensors", {{"w#2", DType::kU8, {2, 3}, bottom}}).ok());
  auto ckpt = OpenCheckpoint(dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  BuildOptions options;
  options.chunk_size = kMinChunkSize;
  auto m = BuildManifest(*ckpt, kChannel, version, options);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  m->metadata[std::string(kSlicesKey)] =
      SlicesText({{"w", 0, "w#0", 0, 2, 4}, {"w", 0, "w#2", 2, 2, 4}});
  m->root = ComputeRoot(*m);
  return *m;
}

Result<ReceivedVersion> WaitFor(const std::filesystem::path& store, uint64_t v) {
  SubscriberOptions options;
  options.store = store;
  options.channel = kChannel;
  WC_ASSIGN_OR_RETURN(std::unique_ptr<Subscriber> subscriber, Subscriber::Open(options));
  return subscriber->Wait(Version(v), 10s);
}

TEST(ReceivedVersion, AssemblesAWholeTensorFromItsSlices) {
  TempDir dir;
  const Manifest m = WriteSlices(dir.path() / "ckpt", Version(1));
  auto store = Store::Open(dir.path() / "store");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(store->ImportDirectory(kChannel, m, dir.path() / "ckpt").ok());
  auto v = WaitFor(dir.path() / "store", 1);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_FALSE(v->partial());
  EXPECT_EQ(v->whole_tensor_names(), std::vector<std::string>{"w"});
  EXPECT_EQ(v->slices("w"), (std::vector<std::string>{"w#0", "w#2"}));
  auto whole = v->whole_tensor("w");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->dtype, "U8");
  EXPECT_EQ(whole->shape, (std::vector<uint64_t>{4, 3}));
  EXPECT_EQ(whole->bytes, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  // A slice by its name, copied whole; an unknown name is kNotFound.
  auto slice = v->whole_tensor("w#2");
  ASSERT_TRUE(slice.ok());
  EXPECT_EQ(slice->bytes, (std::vector<uint8_t>{7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(v->whole_tensor("nope").status().code(), Code::kNotFound);
}

TEST(ReceivedVersion, APartialVersionOffersOnlyItsTensors) {
  TempDir dir;
  const Manifest m = WriteSlices(dir.path() / "ckpt", Version(1));
  auto store = Store::Open(dir.path() / "store");
  ASSERT_TRUE(store.ok());
  // Staged chunk by chunk from the files, as an agent would, then committed for w#0 only.
  auto staged = store->BeginStaging(kChannel, m);
  ASSERT_TRUE(staged.ok());
  std::string flat;
  for (const ManifestFile& f : m.files) {
    std::ifstream in(dir.path() / "ckpt" / f.path, std::ios::binary);
    flat += std::string(std::istreambuf_iterator<char>(in), {});
  }
  for (uint32_t i = 0; i < m.chunk_count(); ++i) {
    const ByteRange r = m.ChunkRange(ChunkIndex(i));
    ASSERT_TRUE(
        staged->PutChunk(ChunkIndex(i), AsBytes(std::string_view(flat).substr(r.offset, r.size)))
            .ok());
  }
  PartialVersion wanted;
  wanted.patterns = {"w#0*"};
  wanted.tensors = {"w#0"};
  ASSERT_TRUE(store->CommitPartial(kChannel, Version(1), wanted).ok());

  auto v = WaitFor(dir.path() / "store", 1);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->partial());
  EXPECT_EQ(v->tensor_patterns(), std::vector<std::string>{"w#0*"});
  ASSERT_EQ(v->tensors().size(), 1u);
  EXPECT_EQ(v->tensors()[0].name, "w#0");
  EXPECT_EQ(v->unselected_tensors(), std::vector<std::string>{"w#2"});
  auto other = v->tensor("w#2");
  EXPECT_EQ(other.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("was not received"), std::string::npos)
      << other.status().ToString();
  EXPECT_TRUE(v->tensor("w#0").ok());
  // The whole tensor lacks a slice here.
  EXPECT_TRUE(v->whole_tensor_names().empty());
  EXPECT_EQ(v->whole_tensor("w").status().code(), Code::kFailedPrecondition);
}

}  // namespace
}  // namespace weightcast
