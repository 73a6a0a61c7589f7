// Loads a version tensor by tensor as it arrives (docs/streaming.md): each tensor is copied into
// this program's own buffers as soon as every chunk of it is verified, then the program waits
// for the version to be committed before it would serve from it.
//
//   stream_load STORE CHANNEL VERSION COORDINATOR SECRET_FILE   an in-process agent fetches it
//   stream_load                                                 publishes v1 into a new local
//                                                               store, then streams it
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <weightcast/publisher.h>
#include <weightcast/subscriber.h>

namespace {

int Fail(const char* what, const weightcast::Status& status) {
  std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  weightcast::SubscriberOptions options;
  uint64_t version = 1;
  if (argc == 6) {
    options.store = argv[1];
    options.channel = argv[2];
    version = std::strtoull(argv[3], nullptr, 10);
    options.coordinator = argv[4];
    options.secret.secret_file = argv[5];
  } else if (argc == 1) {
    std::string pattern = (std::filesystem::temp_directory_path() / "weightcast_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return 1;
    options.store = pattern + "/store";
    options.channel = "policy";
    weightcast::PublisherOptions p;
    p.store = options.store;
    p.channel = options.channel;
    auto publisher = weightcast::Publisher::Open(p);
    if (!publisher.ok()) return Fail("Publisher::Open", publisher.status());
    std::vector<float> a(1 << 20, 0.5f), b(1 << 18, -2.0f);
    auto bytes = [](const std::vector<float>& v) {
      return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()),
                                      v.size() * sizeof(float));
    };
    auto published = (*publisher)
                         ->Publish({{{"layers.0.weight", "F32", {1024, 1024}, bytes(a)},
                                     {"layers.1.weight", "F32", {512, 512}, bytes(b)}}});
    if (!published.ok()) return Fail("Publish", published.status());
  } else {
    std::fprintf(stderr, "usage: %s [STORE CHANNEL VERSION COORDINATOR SECRET_FILE]\n", argv[0]);
    return 2;
  }

  auto subscriber = weightcast::Subscriber::Open(options);
  if (!subscriber.ok()) return Fail("Subscriber::Open", subscriber.status());
  weightcast::StreamOptions stream_options;
  stream_options.timeout = std::chrono::minutes(5);
  auto stream = (*subscriber)->Stream(weightcast::Version(version), stream_options);
  if (!stream.ok()) return Fail("Subscriber::Stream", stream.status());

  std::map<std::string, std::vector<uint8_t>> loaded;  // this program's own copy of the weights
  const auto start = std::chrono::steady_clock::now();
  while (true) {
    auto tensor = (*stream)->Next();
    if (!tensor.ok()) return Fail("VersionStream::Next", tensor.status());  // aborted: drop all
    if (!tensor->has_value()) break;
    const weightcast::TensorView& t = **tensor;
    loaded[t.name].assign(t.bytes.begin(), t.bytes.end());
    std::printf("%7.3f s  %s %s, %zu bytes (%zu of %zu)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                t.name.c_str(), t.dtype.c_str(), t.bytes.size(), (*stream)->handed_over(),
                (*stream)->tensor_count());
  }
  weightcast::Status committed = (*stream)->WaitCommitted();
  if (!committed.ok()) return Fail("VersionStream::WaitCommitted", committed);
  std::printf("v%llu committed: %zu tensors loaded\n", static_cast<unsigned long long>(version),
              loaded.size());
  return 0;
}
