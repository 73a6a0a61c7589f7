// Publishes a few tensors from memory into a local store, then subscribes to the store and prints
// what it received: the weightcast C++ API end to end, on one machine (docs/cpp_api.md).
//
//   publish_subscribe [STORE_DIR]      (default: a new directory under /tmp)
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <weightcast/publisher.h>
#include <weightcast/subscriber.h>

namespace {

std::span<const uint8_t> AsBytes(const std::vector<float>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)};
}

int Fail(const char* what, const weightcast::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string store;
  if (argc > 1) {
    store = argv[1];
  } else {
    std::string pattern = (std::filesystem::temp_directory_path() / "weightcast_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return 1;
    store = pattern + "/store";
  }

  weightcast::PublisherOptions publisher_options;
  publisher_options.store = store;
  publisher_options.channel = "policy";  // no coordinator: a local store only
  publisher_options.chunk_size = weightcast::ChunkSizeLimits::kMin;  // 64 KiB: see Changed below
  auto publisher = weightcast::Publisher::Open(publisher_options);
  if (!publisher.ok()) return Fail("Publisher::Open", publisher.status());

  // Two steps of a tiny "model": the second changes one weight.
  std::vector<float> weight(512 * 512, 0.5f);  // 1 MiB: 16 chunks
  std::vector<float> bias = {1.0f, -1.0f, 0.25f, 4.0f};
  auto first = (*publisher)
                   ->Publish({{{"layer.weight", "F32", {512, 512}, AsBytes(weight)},
                               {"layer.bias", "F32", {4}, AsBytes(bias)}}},
                             /*step=*/1);
  if (!first.ok()) return Fail("Publish", first.status());
  weight[200000] = 2.0f;
  // Asynchronous: returns once the bytes are copied, so `weight` may change right after.
  auto handle = (*publisher)
                    ->PublishAsync({{{"layer.weight", "F32", {512, 512}, AsBytes(weight)},
                                     {"layer.bias", "F32", {4}, AsBytes(bias)}}},
                                   /*step=*/2);
  if (!handle.ok()) return Fail("PublishAsync", handle.status());
  weight[200000] = -9.0f;  // not published: the snapshot was taken
  auto second = handle->Wait();
  if (!second.ok()) return Fail("PublishHandle::Wait", second.status());
  std::printf("published v%llu and v%llu (%llu bytes each) into %s\n",
              static_cast<unsigned long long>(first->version.value()),
              static_cast<unsigned long long>(second->version.value()),
              static_cast<unsigned long long>(second->total_bytes), store.c_str());

  weightcast::SubscriberOptions subscriber_options;
  subscriber_options.store = store;
  subscriber_options.channel = "policy";
  auto subscriber = weightcast::Subscriber::Open(subscriber_options);
  if (!subscriber.ok()) return Fail("Subscriber::Open", subscriber.status());
  auto received = (*subscriber)->Wait(weightcast::Version(2), std::chrono::seconds(10));
  if (!received.ok()) return Fail("Subscriber::Wait", received.status());
  std::printf("received v%llu (step %lld, root %.16s...)\n",
              static_cast<unsigned long long>(received->version().value()),
              static_cast<long long>(received->step().value_or(-1)), received->root().c_str());
  for (const weightcast::TensorView& t : received->tensors()) {
    float value = 0;
    std::memcpy(&value, t.bytes.data() + (t.name == "layer.weight" ? 200000 : 0) * sizeof(float),
                sizeof(float));
    std::printf("  %s %s [%zu dims] %zu bytes, %s = %g\n", t.name.c_str(), t.dtype.c_str(),
                t.shape.size(), t.bytes.size(),
                t.name == "layer.weight" ? "element 200000" : "element 0", value);
    if (t.name == "layer.weight" && value != 2.0f) {
      std::fprintf(stderr, "layer.weight[200000] is %g, but 2 was published\n", value);
      return 1;
    }
  }
  // Only the chunk holding element 200000 differs between the versions.
  auto changes = (*subscriber)->Changed(weightcast::Version(1), weightcast::Version(2));
  if (!changes.ok()) return Fail("Subscriber::Changed", changes.status());
  for (const weightcast::TensorChange& c : *changes) {
    for (const auto& [begin, end] : c.ranges) {
      std::printf("  changed since v1: %s bytes [%llu, %llu)\n", c.name.c_str(),
                  static_cast<unsigned long long>(begin), static_cast<unsigned long long>(end));
    }
  }
  return 0;
}
