// The image's write into the publisher's store in idle time: every byte lands at its offset
// whichever thread wrote it, a caller that hurries writes the pieces left itself, and an error
// comes back from Write.
#include "publish/idle_write.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "testing/temp_dir.h"
#include "util/file.h"

namespace weightcast::publish {
namespace {

using ::weightcast::testing::TempDir;

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  return out;
}

int OpenForWrite(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  return fd;
}

std::vector<uint8_t> ReadBack(const std::filesystem::path& path) {
  auto text = ReadFileToString(path);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return std::vector<uint8_t>(text->begin(), text->end());
}

TEST(IdleWrite, WritesEveryPieceAtItsOffset) {
  TempDir dir;
  const std::vector<uint8_t> bytes = Pattern(4096 * 3 + 1500);  // a short last piece
  IdleWrite write(bytes, 4096);
  const int fd = OpenForWrite(dir.path() / "image");
  Status result = Internal("not run");
  // Write marks its thread SCHED_IDLE for good: never the test's own thread.
  std::thread([&] { result = write.Write(fd, "image"); }).join();
  write.End();
  ::close(fd);
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(ReadBack(dir.path() / "image"), bytes);
  EXPECT_EQ(write.hurried_pieces(), 0u);
  write.Hurry();  // after the end: nothing left, returns at once
  EXPECT_EQ(write.hurried_pieces(), 0u);
}

TEST(IdleWrite, AHurryingCallerWritesThePiecesLeftOnItsOwnThread) {
  TempDir dir;
  // Many small pieces: the idle thread cannot have written them all before the caller joins.
  const std::vector<uint8_t> bytes = Pattern(4u << 20);
  IdleWrite write(bytes, 256);
  const int fd = OpenForWrite(dir.path() / "image");
  Status result = Internal("not run");
  // Hurry before Write was called waits for it (the file is not open yet), then takes pieces.
  std::thread hurry([&] { write.Hurry(); });
  std::thread idle([&] { result = write.Write(fd, "image"); });
  hurry.join();
  idle.join();
  write.End();
  ::close(fd);
  ASSERT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(ReadBack(dir.path() / "image"), bytes);
  EXPECT_GT(write.hurried_pieces(), 0u);
  EXPECT_LE(write.hurried_pieces(), bytes.size() / 256);
}

TEST(IdleWrite, AHurryWithNoWriteToComeReturnsAtItsEnd) {
  const std::vector<uint8_t> bytes = Pattern(1000);
  IdleWrite write(bytes, 100);
  std::thread hurry([&] { write.Hurry(); });
  write.End();  // the store failed before it opened the file: Write is never called
  hurry.join();
  EXPECT_EQ(write.hurried_pieces(), 0u);
}

TEST(IdleWrite, AFailedPieceIsWhatWriteReturns) {
  TempDir dir;
  const std::vector<uint8_t> bytes = Pattern(10000);
  ASSERT_TRUE(WriteFileAtomic(dir.path() / "image", "").ok());
  const int fd = ::open((dir.path() / "image").c_str(), O_RDONLY | O_CLOEXEC);  // cannot write
  ASSERT_GE(fd, 0);
  IdleWrite write(bytes, 4096);
  Status result = Status::Ok();
  std::thread([&] { result = write.Write(fd, "the image"); }).join();
  ::close(fd);
  EXPECT_EQ(result.code(), Code::kIoError) << result.ToString();
  EXPECT_NE(result.message().find("the image"), std::string::npos) << result.ToString();
}

}  // namespace
}  // namespace weightcast::publish
