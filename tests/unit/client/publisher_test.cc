// The public Publisher and Subscriber (include/weightcast/) on a local store: publishing from
// memory, publish_async's snapshot, order and close semantics, and the errors of Open.
#include <weightcast/publisher.h>
#include <weightcast/subscriber.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <numeric>
#include <thread>
#include <vector>

#include "testing/temp_dir.h"

namespace weightcast {
namespace {

namespace fs = std::filesystem;
using ::weightcast::testing::TempDir;
using namespace std::chrono_literals;

std::span<const uint8_t> Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::vector<float> Floats(std::span<const uint8_t> bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::unique_ptr<Publisher> OpenLocal(const fs::path& store, uint32_t keep_versions = 2) {
  PublisherOptions options;
  options.store = store;
  options.channel = "policy";
  options.chunk_size = ChunkSizeLimits::kMin;
  options.keep_versions = keep_versions;
  auto publisher = Publisher::Open(options);
  EXPECT_TRUE(publisher.ok()) << publisher.status().ToString();
  return publisher.ok() ? std::move(publisher).value() : nullptr;
}

std::unique_ptr<Subscriber> OpenReader(const fs::path& store) {
  SubscriberOptions options;
  options.store = store;
  options.channel = "policy";
  auto subscriber = Subscriber::Open(options);
  EXPECT_TRUE(subscriber.ok()) << subscriber.status().ToString();
  return subscriber.ok() ? std::move(subscriber).value() : nullptr;
}

TEST(PublisherApi, PublishesTensorsThatASubscriberReadsInPlace) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store");
  std::vector<float> weight(6);
  std::iota(weight.begin(), weight.end(), 1.0f);
  const std::vector<uint16_t> bias = {0x3f80, 0x4000};  // bf16 1.0, 2.0
  const std::vector<TensorView> tensors = {
      {"weight", "F32", {2, 3}, Bytes(weight)},
      {"bias", "BF16", {2}, {reinterpret_cast<const uint8_t*>(bias.data()), 4}}};
  auto result = publisher->Publish(tensors, 7);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->version, Version(1));
  EXPECT_EQ(result->step, 7);
  EXPECT_EQ(result->root.size(), 64u);
  // A full first version: a sampler holding nothing reads every byte.
  EXPECT_EQ(result->wire_bytes, result->total_bytes);
  EXPECT_FALSE(result->delta);

  auto subscriber = OpenReader(dir.path() / "store");
  auto v = subscriber->Wait(Version(1), 5s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->version(), Version(1));
  EXPECT_EQ(v->step(), 7);
  EXPECT_EQ(v->root(), result->root);
  auto got = v->tensor("weight");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->dtype, "F32");
  EXPECT_EQ(got->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(Floats(got->bytes), weight);
  EXPECT_EQ(v->tensors().size(), 2u);
  EXPECT_EQ(v->tensor("missing").status().code(), Code::kNotFound);
  // The view outlives the Subscriber: the handle holds the mapping.
  subscriber.reset();
  EXPECT_EQ(Floats(v->tensor("weight")->bytes), weight);
}

TEST(PublisherApi, RefusesBadTensorsBeforeAnythingIsWritten) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store");
  const std::vector<float> three(3);
  const std::vector<std::vector<TensorView>> bad = {
      {},
      {{"", "F32", {3}, Bytes(three)}},
      {{"x", "F32", {4}, Bytes(three)}},
      {{"x", "C64", {3}, Bytes(three)}},
      {{"x", "F32", {3}, Bytes(three)}, {"x", "F32", {3}, Bytes(three)}},
  };
  for (const auto& tensors : bad) {
    EXPECT_EQ(publisher->Publish(tensors).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(publisher->PublishAsync(tensors).status().code(), Code::kInvalidArgument);
  }
  auto subscriber = OpenReader(dir.path() / "store");
  EXPECT_EQ(subscriber->Wait(Version(0), 100ms).status().code(), Code::kDeadlineExceeded);
}

TEST(PublisherApi, AsyncCopyIsNotAffectedByChangesAfterTheCall) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store");
  std::vector<float> weight(100000, 1.0f);
  auto handle = publisher->PublishAsync({{{"w", "F32", {100000}, Bytes(weight)}}}, 1);
  ASSERT_TRUE(handle.ok()) << handle.status().ToString();
  std::fill(weight.begin(), weight.end(), 2.0f);  // at once, while the publish runs
  auto result = handle->Wait(30s);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_TRUE(handle->done());
  auto v = OpenReader(dir.path() / "store")->Wait(Version(1), 5s);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(Floats(v->tensor("w")->bytes), std::vector<float>(100000, 1.0f));
}

TEST(PublisherApi, AsyncWithoutCopyKeepsTheCallersBuffersUntilDone) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store");
  auto weight = std::make_shared<std::vector<float>>(1000, 3.0f);
  std::weak_ptr<std::vector<float>> watch = weight;
  AsyncOptions in_place;
  in_place.copy = false;
  in_place.keep_alive = weight;
  auto handle =
      publisher->PublishAsync({{{"w", "F32", {1000}, Bytes(*weight)}}}, 1, std::move(in_place));
  ASSERT_TRUE(handle.ok());
  weight.reset();  // the publish owns the last reference now
  ASSERT_TRUE(handle->Wait(30s).ok());
  EXPECT_TRUE(watch.expired());  // released by the time the handle is done
  auto v = OpenReader(dir.path() / "store")->Wait(Version(1), 5s);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(Floats(v->tensor("w")->bytes), std::vector<float>(1000, 3.0f));
}

TEST(PublisherApi, PublishesRunInSubmissionOrder) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store", 8);
  std::vector<PublishHandle> handles;
  for (int step = 0; step < 5; ++step) {
    const std::vector<float> w(20000, static_cast<float>(step));
    auto handle = publisher->PublishAsync({{{"w", "F32", {20000}, Bytes(w)}}}, step);
    ASSERT_TRUE(handle.ok());
    handles.push_back(*handle);
  }
  // A blocking publish queues behind them.
  const std::vector<float> last(20000, 9.0f);
  auto blocking = publisher->Publish({{{"w", "F32", {20000}, Bytes(last)}}}, 9);
  ASSERT_TRUE(blocking.ok());
  EXPECT_EQ(blocking->version, Version(6));
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(handles[step].done());
    auto r = handles[step].Wait();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->version, Version(step + 1));
    EXPECT_EQ(r->step, step);
  }
}

TEST(PublisherApi, CloseFinishesQueuedPublishesEvenWhenTheirHandlesWereDropped) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store", 4);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> w(50000, static_cast<float>(step));
    ASSERT_TRUE(publisher->PublishAsync({{{"w", "F32", {50000}, Bytes(w)}}}, step).ok());
  }
  publisher.reset();  // the destructor waits for them
  auto v = OpenReader(dir.path() / "store")->Wait(Version(0), 1s);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->version(), Version(3));
  EXPECT_EQ(v->step(), 2);
}

TEST(PublisherApi, CloseWithAbortFailsThePublishesNotStarted) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store", 4);
  std::vector<PublishHandle> handles;
  for (int step = 0; step < 20; ++step) {
    const std::vector<float> w(1 << 18, static_cast<float>(step));  // 1 MiB each
    auto handle = publisher->PublishAsync({{{"w", "F32", {1 << 18}, Bytes(w)}}}, step);
    ASSERT_TRUE(handle.ok());
    handles.push_back(*handle);
  }
  publisher->Close(PendingPublishes::kAbort);
  size_t aborted = 0;
  uint64_t next_version = 1;
  for (const PublishHandle& h : handles) {
    ASSERT_TRUE(h.done());
    auto r = h.Wait();
    if (r.ok()) {
      EXPECT_EQ(aborted, 0u) << "a publish ran after one was aborted";
      EXPECT_EQ(r->version, Version(next_version++));
    } else {
      EXPECT_EQ(r.status().code(), Code::kAborted) << r.status().ToString();
      ++aborted;
    }
  }
  EXPECT_GT(aborted, 0u);
  const std::vector<float> w(4);
  EXPECT_EQ(publisher->Publish({{{"w", "F32", {4}, Bytes(w)}}}).status().code(),
            Code::kFailedPrecondition);
}

TEST(PublisherApi, ALocalPublisherSeedsNothing) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store");
  EXPECT_FALSE(publisher->coordinated());
  EXPECT_EQ(publisher->WaitUntil(SeedUntil::kReplicated, 1s).code(), Code::kFailedPrecondition);
  EXPECT_EQ(publisher->status().status().code(), Code::kFailedPrecondition);
  const std::vector<float> w(4);
  auto handle = publisher->PublishAsync({{{"w", "F32", {4}, Bytes(w)}}});
  ASSERT_TRUE(handle.ok());
  EXPECT_EQ(handle->WaitUntil(SeedUntil::kReplicated, 10s).code(), Code::kFailedPrecondition);
  EXPECT_EQ(PublishHandle().Wait().status().code(), Code::kFailedPrecondition);
}

TEST(PublisherApi, OpenChecksItsOptions) {
  TempDir dir;
  PublisherOptions options;
  options.store = dir.path() / "store";
  options.channel = "../escape";
  EXPECT_EQ(Publisher::Open(options).status().code(), Code::kInvalidArgument);
  options.channel = "policy";
  options.chunk_size = 100;
  EXPECT_EQ(Publisher::Open(options).status().code(), Code::kInvalidArgument);
  options.chunk_size = ChunkSizeLimits::kAuto;
  options.keep_versions = 0;
  EXPECT_EQ(Publisher::Open(options).status().code(), Code::kInvalidArgument);
  options.keep_versions = 2;
  ASSERT_TRUE(Publisher::Open(options).ok());  // released at once: it can be opened again
  auto held = Publisher::Open(options);
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(Publisher::Open(options).status().code(), Code::kUnavailable);  // in use
}

TEST(PublisherApi, APathThatIsNotAStoreIsAFailedPrecondition) {
  TempDir dir;
  const fs::path home = dir.path() / "home";
  fs::create_directories(home);
  std::ofstream(home / "notes.txt") << "mine";
  PublisherOptions options;
  options.store = home;
  options.channel = "policy";
  auto opened = Publisher::Open(options);
  EXPECT_EQ(opened.status().code(), Code::kFailedPrecondition) << opened.status().ToString();
  EXPECT_FALSE(fs::exists(home / ".lock"));  // nothing was created there
  options.store = home / "notes.txt";
  EXPECT_EQ(Publisher::Open(options).status().code(), Code::kFailedPrecondition);

  SubscriberOptions reader;
  reader.store = home;
  reader.channel = "policy";
  auto subscriber = Subscriber::Open(reader);
  ASSERT_TRUE(subscriber.ok());
  EXPECT_EQ((*subscriber)->Wait(Version(0), 10s).status().code(), Code::kFailedPrecondition);
}

TEST(SubscriberApi, ChangedReportsOnlyTheChunksThatDiffer) {
  TempDir dir;
  auto publisher = OpenLocal(dir.path() / "store");
  std::vector<float> w(4 * ChunkSizeLimits::kMin / sizeof(float), 0.5f);  // four chunks
  const std::vector<float> other(16, 1.0f);
  ASSERT_TRUE(
      publisher->Publish({{{"w", "F32", {w.size()}, Bytes(w)}, {"z", "F32", {16}, Bytes(other)}}})
          .ok());
  w[w.size() / 2 + 3] = 7.0f;  // in the third chunk
  ASSERT_TRUE(
      publisher->Publish({{{"w", "F32", {w.size()}, Bytes(w)}, {"z", "F32", {16}, Bytes(other)}}})
          .ok());
  auto subscriber = OpenReader(dir.path() / "store");
  ASSERT_TRUE(subscriber->Wait(Version(2), 5s).ok());
  auto changes = subscriber->Changed(Version(1), Version(2));
  ASSERT_TRUE(changes.ok()) << changes.status().ToString();
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].name, "w");
  ASSERT_EQ((*changes)[0].ranges.size(), 1u);
  const auto [begin, end] = (*changes)[0].ranges[0];
  const uint64_t changed_at = (w.size() / 2 + 3) * sizeof(float);
  EXPECT_LE(begin, changed_at);
  EXPECT_GT(end, changed_at);
  EXPECT_LE(end - begin, ChunkSizeLimits::kMin);
  EXPECT_EQ(subscriber->Changed(Version(1), Version(9)).status().code(), Code::kNotFound);
}

TEST(PublicHelpers, ParseWhatTheCliParses) {
  EXPECT_EQ(*ParseByteSize("1MiB"), 1u << 20);
  EXPECT_EQ(ParseByteSize("-1").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*DTypeBitWidth("BF16"), 16u);
  EXPECT_EQ(DTypeBitWidth("C64").status().code(), Code::kInvalidArgument);
  const std::vector<uint64_t> shape = {2, 3};
  EXPECT_EQ(*TensorSizeInBytes("F32", shape), 24u);
  EXPECT_EQ(*ParseLogLevel("info"), LogLevel::kInfo);
  EXPECT_EQ(ParseLogLevel("loud").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(*ParseSeedUntil("complete"), SeedUntil::kComplete);
}

}  // namespace
}  // namespace weightcast
