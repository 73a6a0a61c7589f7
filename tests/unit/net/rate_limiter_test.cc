#include "net/rate_limiter.h"

#include <gtest/gtest.h>

#include "net/tcp_transport.h"
#include "net_test_util.h"

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;

TEST(TokenBucket, LongRunRateIsExactOnFakeClock) {
  FakeClock clock;
  TokenBucket bucket(10'000'000, 100'000, clock);  // 10 MB/s, 100 kB burst
  // Send 1000 frames of 64 KiB as fast as the bucket allows.
  const uint64_t kFrame = 64 << 10;
  for (int i = 0; i < 1000; ++i) {
    Duration wait = bucket.Reserve(kFrame);
    if (wait > Duration(0)) clock.Advance(wait);
  }
  const double seconds =
      std::chrono::duration<double>(clock.Now().time_since_epoch()).count() - 1.0;
  const double expected = (1000.0 * kFrame - 100'000) / 10'000'000;
  EXPECT_NEAR(seconds, expected, expected * 0.001);
}

TEST(TokenBucket, BurstIsFreeAfterIdleButCapped) {
  FakeClock clock;
  TokenBucket bucket(1'000'000, 50'000, clock);
  EXPECT_EQ(bucket.Reserve(50'000), Duration(0));
  EXPECT_GT(bucket.Reserve(1), Duration(0));
  clock.Advance(10s);  // idle: tokens refill only up to the burst
  EXPECT_EQ(bucket.Reserve(49'000), Duration(0));
  Duration wait = bucket.Reserve(101'000);
  EXPECT_NEAR(std::chrono::duration<double>(wait).count(), 0.1, 0.001);
}

TEST(TokenBucket, UploadLimitHoldsOverRealTcp) {
  auto limit = std::make_shared<TokenBucket>(16u << 20, 256u << 10);  // 16 MiB/s
  Options sender = testing::TestOptions(1, nullptr);
  sender.upload_limit = limit;
  auto server = TcpTransport::Create(testing::TestOptions(2, nullptr));
  auto client = TcpTransport::Create(sender);
  ASSERT_TRUE(server.ok() && client.ok());
  auto listener = (*server)->Listen("127.0.0.1:0");
  auto c = (*client)->Connect((*listener)->address(), 5s);
  ASSERT_TRUE(c.ok());
  auto s = (*listener)->Accept(5s);
  ASSERT_TRUE(s.ok());
  auto payload = std::make_shared<std::vector<uint8_t>>(1 << 20);
  const int kFrames = 8;  // 8 MiB at 16 MiB/s: ~0.5 s
  auto start = std::chrono::steady_clock::now();
  std::thread reader([&] {
    for (int i = 0; i < kFrames; ++i) ASSERT_TRUE((*s)->Receive(5s).ok());
  });
  for (int i = 0; i < kFrames; ++i) ASSERT_TRUE((*c)->SendChunk({}, *payload, payload).ok());
  reader.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double expected = (kFrames * (1 << 20) - (256 << 10)) / double(16u << 20);
  EXPECT_GT(seconds, expected * 0.9);
  EXPECT_LT(seconds,
            expected * 10);  // sanity only (sanitizer builds are slow); exactness: fake clock
}

TEST(TokenBucket, DownloadLimitHoldsOverRealTcp) {
  auto limit = std::make_shared<TokenBucket>(16u << 20, 256u << 10);
  Options receiver = testing::TestOptions(2, nullptr);
  receiver.download_limit = limit;
  auto server = TcpTransport::Create(receiver);
  auto client = TcpTransport::Create(testing::TestOptions(1, nullptr));
  auto listener = (*server)->Listen("127.0.0.1:0");
  auto c = (*client)->Connect((*listener)->address(), 5s);
  ASSERT_TRUE(c.ok());
  auto s = (*listener)->Accept(5s);
  ASSERT_TRUE(s.ok());
  auto payload = std::make_shared<std::vector<uint8_t>>(1 << 20);
  const int kFrames = 8;
  auto start = std::chrono::steady_clock::now();
  std::thread writer([&] {
    for (int i = 0; i < kFrames; ++i) ASSERT_TRUE((*c)->SendChunk({}, *payload, payload).ok());
  });
  for (int i = 0; i < kFrames; ++i) ASSERT_TRUE((*s)->Receive(5s).ok());
  writer.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double expected = (kFrames * (1 << 20) - (256 << 10)) / double(16u << 20);
  EXPECT_GT(seconds, expected * 0.9);
  EXPECT_LT(seconds,
            expected * 10);  // sanity only (sanitizer builds are slow); exactness: fake clock
}

}  // namespace
}  // namespace weightcast::net
