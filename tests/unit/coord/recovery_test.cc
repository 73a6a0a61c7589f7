// Crash safety of the coordinator's state directory: restarts, torn log tails, corruption.
#include <gtest/gtest.h>

#include <fstream>

#include "coord/log_file.h"
#include "coord/version_log.h"
#include "coord_test_util.h"

namespace weightcast::coord {
namespace {

using testing::AsDelta;
using testing::CoordinatorHarness;
using testing::kSecret;
using testing::Signed;
using testing::TestManifest;

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Publishes v1 (full) and v2 (delta on v1) of "policy" and stops the coordinator.
void PublishTwo(CoordinatorHarness& h) {
  ASSERT_TRUE(h.Start().ok());
  auto pub = h.Connect(7, net::Role::kPublisher);
  const Manifest v1 = TestManifest("policy", 1, 1);
  ASSERT_TRUE(pub->Publish(Signed(v1)).ok());
  ASSERT_TRUE(pub->Publish(Signed(AsDelta(TestManifest("policy", 2, 2), v1))).ok());
  pub.reset();
  h.Stop();
}

TEST(CoordinatorRecovery, RestartServesTheSameLogAndManifests) {
  CoordinatorHarness h;
  PublishTwo(h);
  ASSERT_TRUE(h.Start().ok());
  EXPECT_EQ(h.coordinator().recovery().records, 2u);
  EXPECT_EQ(h.coordinator().recovery().torn_bytes, 0u);
  auto tool = h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->channels(0).versions_size(), 2);
  EXPECT_EQ(status->channels(0).versions(1).base_version(), 1u);
  EXPECT_EQ(status->channels(0).versions(1).payload_bytes(), 2000u);
  EXPECT_EQ(status->channels(0).current_version(), 2u);
  EXPECT_EQ(*tool->GetManifest("policy", Version(1)), Signed(TestManifest("policy", 1, 1)));
  const Manifest v2 = AsDelta(TestManifest("policy", 2, 2), TestManifest("policy", 1, 1));
  EXPECT_EQ(*tool->GetManifest("policy", Version(0)), Signed(v2));
  // The log still checks deltas and versions after the restart.
  auto pub = h.Connect(7, net::Role::kPublisher);
  EXPECT_EQ(*pub->Publish(Signed(v2)), Version(2));  // a retried publish
  EXPECT_EQ(pub->Publish(Signed(TestManifest("policy", 2, 5))).status().code(),
            Code::kAlreadyExists);
  EXPECT_TRUE(pub->Publish(Signed(AsDelta(TestManifest("policy", 3, 3), v2))).ok());
}

TEST(CoordinatorRecovery, TornLastRecordIsCutOffAndLaterAppendsFollowTheGoodOnes) {
  CoordinatorHarness h;
  PublishTwo(h);
  const std::filesystem::path log = h.state_dir() / "log";
  std::string bytes = ReadAll(log);
  // A crash in the middle of a third append: a header and part of a record.
  WriteAll(log, bytes + std::string("\x40\x00\x00\x00\x01\x02\x03", 7));
  ASSERT_TRUE(h.Start().ok());
  EXPECT_EQ(h.coordinator().recovery().torn_bytes, 7u);
  EXPECT_EQ(h.coordinator().recovery().records, 2u);
  EXPECT_EQ(ReadAll(log), bytes);  // cut back
  auto pub = h.Connect(7, net::Role::kPublisher);
  ASSERT_TRUE(pub->Publish(Signed(TestManifest("policy", 3, 3))).ok());
  pub.reset();
  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  EXPECT_EQ(h.coordinator().recovery().torn_bytes, 0u);
  EXPECT_EQ(h.coordinator().recovery().records, 3u);
}

TEST(CoordinatorRecovery, LastRecordFailingItsCheckIsTornAndItsVersionCanBePublishedAgain) {
  CoordinatorHarness h;
  PublishTwo(h);
  const std::filesystem::path log = h.state_dir() / "log";
  std::string bytes = ReadAll(log);
  bytes.back() ^= 0x55;  // the end of v2's record: written length, garbage content
  WriteAll(log, bytes);
  ASSERT_TRUE(h.Start().ok());
  EXPECT_GT(h.coordinator().recovery().torn_bytes, 0u);
  auto pub = h.Connect(7, net::Role::kPublisher);
  auto status = pub->GetStatus("policy");
  ASSERT_EQ(status->channels(0).versions_size(), 1);
  // v2's manifest file is an orphan now; publishing v2 again overwrites it.
  const Manifest v2 = AsDelta(TestManifest("policy", 2, 22), TestManifest("policy", 1, 1));
  ASSERT_TRUE(pub->Publish(Signed(v2)).ok());
  EXPECT_EQ(*pub->GetManifest("policy", Version(2)), Signed(v2));
}

TEST(CoordinatorRecovery, ZeroFilledTailIsTorn) {
  CoordinatorHarness h;
  PublishTwo(h);
  const std::filesystem::path log = h.state_dir() / "log";
  const std::string bytes = ReadAll(log);
  // The file grew over a third append whose data never reached the disk.
  WriteAll(log, bytes + std::string(150, '\0'));
  ASSERT_TRUE(h.Start().ok());
  EXPECT_EQ(h.coordinator().recovery().torn_bytes, 150u);
  EXPECT_EQ(h.coordinator().recovery().records, 2u);
  EXPECT_EQ(ReadAll(log), bytes);
}

TEST(CoordinatorRecovery, GarbageAfterTheLastRecordIsAnError) {
  CoordinatorHarness h;
  PublishTwo(h);
  const std::filesystem::path log = h.state_dir() / "log";
  // An empty record with a wrong check, then more bytes that are not zeros.
  WriteAll(log, ReadAll(log) + std::string(12, '\0') + "junk after it");
  auto opened = Coordinator::Open(h.Options());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kCorrupt);
}

TEST(CoordinatorRecovery, CorruptionBeforeTheLastRecordIsAnError) {
  CoordinatorHarness h;
  PublishTwo(h);
  const std::filesystem::path log = h.state_dir() / "log";
  std::string bytes = ReadAll(log);
  bytes[8 + 12 + 3] ^= 0x01;  // inside the first record's payload
  WriteAll(log, bytes);
  auto opened = Coordinator::Open(h.Options());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kCorrupt);
  EXPECT_NE(opened.status().message().find("not the last one"), std::string::npos)
      << opened.status().ToString();
}

TEST(CoordinatorRecovery, MissingOrAlteredManifestIsAnError) {
  CoordinatorHarness h;
  PublishTwo(h);
  const std::filesystem::path manifests = h.state_dir() / "manifests" / "policy";
  const std::filesystem::path v1 = manifests / "00000000000000000001.wcsm";
  ASSERT_TRUE(std::filesystem::exists(v1));
  const std::string saved = ReadAll(v1);
  std::filesystem::remove(v1);
  auto opened = Coordinator::Open(h.Options());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kCorrupt);
  // Another validly signed manifest in its place is not the one the log recorded.
  WriteAll(v1,
           std::string(reinterpret_cast<const char*>(Signed(TestManifest("policy", 1, 9)).data()),
                       Signed(TestManifest("policy", 1, 9)).size()));
  opened = Coordinator::Open(h.Options());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kCorrupt);
  WriteAll(v1, saved);
  EXPECT_TRUE(Coordinator::Open(h.Options()).ok());
}

TEST(CoordinatorRecovery, AnotherClusterSecretCannotReadTheState) {
  CoordinatorHarness h;
  PublishTwo(h);
  CoordinatorOptions options = h.Options();
  options.secret = "a different cluster secret entirely";
  auto opened = Coordinator::Open(options);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kUnauthenticated);
}

TEST(CoordinatorRecovery, RollbackSurvivesARestart) {
  CoordinatorHarness h;
  PublishTwo(h);
  ASSERT_TRUE(h.Start().ok());
  auto tool = h.Connect(9, net::Role::kTool);
  EXPECT_EQ(*tool->Rollback("policy", Version(0)), Version(1));
  tool.reset();
  h.Stop();
  ASSERT_TRUE(h.Start().ok());
  tool = h.Connect(9, net::Role::kTool);
  auto status = tool->GetStatus("policy");
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->channels(0).current_version(), 1u);
  EXPECT_EQ(status->channels(0).versions(1).decision(), wire::DECISION_ABORT);
}

TEST(LogFile, RefusesAFileThatIsNotALog) {
  weightcast::testing::TempDir dir;
  WriteAll(dir.path() / "log", "something else entirely");
  auto opened = LogFile::Open(dir.path() / "log");
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), Code::kCorrupt);
}

TEST(LogFile, AppendsAreReadBackInOrder) {
  weightcast::testing::TempDir dir;
  {
    auto opened = LogFile::Open(dir.path() / "log");
    ASSERT_TRUE(opened.ok());
    EXPECT_TRUE(opened->records.empty());
    ASSERT_TRUE(opened->file->Append("one").ok());
    ASSERT_TRUE(opened->file->Append("").ok());
    ASSERT_TRUE(opened->file->Append(std::string(5000, 'x')).ok());
  }
  auto opened = LogFile::Open(dir.path() / "log");
  ASSERT_TRUE(opened.ok());
  ASSERT_EQ(opened->records.size(), 3u);
  EXPECT_EQ(opened->records[0], "one");
  EXPECT_EQ(opened->records[1], "");
  EXPECT_EQ(opened->records[2], std::string(5000, 'x'));
}

}  // namespace
}  // namespace weightcast::coord
