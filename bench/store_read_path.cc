// The upload read path of a seed (docs/BENCHMARKS.md, the upload read path row): every chunk of a
// committed version sent PEERS times over a Unix socket (a thread drains the other end), read
// two ways in the same run, on the same files, page cache warm:
//   copy: what Store::ReadChunk did before the mapped view: a fresh zero-filled vector per read,
//         open + pread + close, then write() from the vector;
//   view: Store::OpenView + MappedVersion::Chunk, write() straight from the mapping (what the
//         transport's gather write does with the frame's payload).
// Reports CPU seconds (user + sys) per GB sent, of the process (both socket ends) and of the
// sending thread alone, and the bytes copied in user space per GB sent (copy: the pread and the
// zero fill; view: chunks spanning files only).
//
//   bench_store_read_path [size=1GiB] [chunk=8MiB] [peers=4] [files=3]
// Last line: one JSON object.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "hash/digest.h"
#include "manifest/builder.h"
#include "store/layout.h"
#include "store/store.h"
#include "util/file.h"
#include "util/text.h"

namespace wc = weightcast;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "%s\n", what.c_str());
  std::exit(1);
}

// `who`: RUSAGE_SELF (the process: both socket ends) or RUSAGE_THREAD (the sender alone: the
// read path and its write into the socket).
double CpuSeconds(int who) {
  rusage r{};
  ::getrusage(who, &r);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(r.ru_utime) + s(r.ru_stime);
}

void WriteAllOrDie(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) Die("write to the socket failed");
    done += static_cast<size_t>(n);
  }
}

// The version: `files` files of equal size with a byte pattern, committed (hard-linked in).
wc::Manifest MakeVersion(wc::Store& store, const fs::path& src, uint64_t size, uint64_t chunk,
                         uint32_t nfiles) {
  wc::Manifest m;
  m.channel = "bench";
  m.version = wc::Version(1);
  m.chunk_size = chunk;
  fs::create_directories(src);
  std::vector<uint8_t> flat(size);
  for (uint64_t i = 0; i < size; ++i) flat[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  uint64_t offset = 0;
  for (uint32_t f = 0; f < nfiles; ++f) {
    const uint64_t n = f + 1 == nfiles ? size - offset : size / nfiles;
    const std::string name = "model-" + std::to_string(f) + ".safetensors";
    const int fd = ::open((src / name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) Die("cannot create " + (src / name).string());
    if (!wc::WriteAll(fd, std::span<const uint8_t>(flat.data() + offset, n), name).ok()) {
      Die("cannot write " + name);
    }
    ::close(fd);
    m.files.push_back({name, n, offset});
    offset += n;
  }
  for (uint64_t at = 0; at < size; at += chunk) {
    const uint64_t n = std::min(chunk, size - at);
    m.chunk_hashes.push_back(
        wc::HashBytes(m.hash_algorithm, std::span<const uint8_t>(flat.data() + at, n)));
  }
  m.root = wc::ComputeRoot(m);
  if (wc::Status s = store.ImportDirectory("bench", m, src, wc::ImportMode::kHardlink); !s.ok()) {
    Die(s.ToString());
  }
  return m;
}

struct Pass {
  double cpu_s = 0;
  double sender_cpu_s = 0;
  double wall_s = 0;
  uint64_t sent = 0;
  uint64_t copied = 0;
};

}  // namespace

int main(int argc, char** argv) {
  auto size_arg = [&](int i, const char* fallback) {
    auto parsed = wc::ParseSize(argc > i ? argv[i] : fallback);
    if (!parsed.ok()) Die(parsed.status().ToString());
    return *parsed;
  };
  const uint64_t size = size_arg(1, "1GiB");
  const uint64_t chunk = size_arg(2, "8MiB");
  const int peers = argc > 3 ? std::atoi(argv[3]) : 4;
  const auto nfiles = static_cast<uint32_t>(argc > 4 ? std::atoi(argv[4]) : 3);

  const char* tmp = std::getenv("TMPDIR");
  const fs::path work =
      fs::path(tmp != nullptr ? tmp : "/tmp") / ("wc-bench-read-" + std::to_string(::getpid()));
  auto store = wc::Store::Open(work / "store");
  if (!store.ok()) Die(store.status().ToString());
  const wc::Manifest m = MakeVersion(*store, work / "src", size, chunk, nfiles);
  const fs::path dir = store->VersionPath("bench", wc::Version(1));

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) Die("socketpair failed");
  std::thread drain([&] {
    std::vector<uint8_t> sink(1 << 20);
    while (::read(sv[1], sink.data(), sink.size()) > 0) {
    }
  });

  // Before the mapped view: ReadChunk's own loop, written out.
  auto read_copy = [&](wc::ChunkIndex index, Pass& pass) {
    const wc::ByteRange range = m.ChunkRange(index);
    std::vector<uint8_t> out(range.size);
    wc::Status st = wc::store::ForEachSegment(
        m.files, range, [&](size_t file, uint64_t at, uint64_t len, uint64_t to) {
          const fs::path path = dir / m.files[file].path;
          const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
          if (fd < 0) return wc::IoError("open " + path.string());
          wc::Status s = wc::ReadExactAt(fd, at, std::span<uint8_t>(out.data() + to, len), "f");
          ::close(fd);
          return s;
        });
    if (!st.ok()) Die(st.ToString());
    WriteAllOrDie(sv[0], out);
    pass.sent += out.size();
    pass.copied += 2 * out.size();  // the zero fill and the pread
  };
  uint64_t gathered_before = 0;
  auto read_view = [&](wc::ChunkIndex index, Pass& pass) {
    auto view = store->OpenView("bench", wc::Version(1));
    if (!view.ok()) Die(view.status().ToString());
    auto bytes = (*view)->Chunk(index);
    if (!bytes.ok()) Die(bytes.status().ToString());
    WriteAllOrDie(sv[0], bytes->bytes);
    pass.sent += bytes->bytes.size();
  };
  auto run = [&](auto&& read) {
    Pass pass;
    const double cpu0 = CpuSeconds(RUSAGE_SELF);
    const double sender0 = CpuSeconds(RUSAGE_THREAD);
    const auto t0 = std::chrono::steady_clock::now();
    for (int p = 0; p < peers; ++p) {
      for (uint32_t i = 0; i < m.chunk_count(); ++i) read(wc::ChunkIndex(i), pass);
    }
    pass.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    pass.cpu_s = CpuSeconds(RUSAGE_SELF) - cpu0;
    pass.sender_cpu_s = CpuSeconds(RUSAGE_THREAD) - sender0;
    return pass;
  };
  run(read_copy);  // warms the page cache (and the drain thread)
  Pass copy, view;
  for (int round = 0; round < 2; ++round) {  // alternated, so that drift hits both alike
    Pass c = run(read_copy);
    gathered_before = (*store->OpenView("bench", wc::Version(1)))->gathered_bytes();
    Pass v = run(read_view);
    v.copied = (*store->OpenView("bench", wc::Version(1)))->gathered_bytes() - gathered_before;
    for (Pass* into : {&copy, &view}) {
      const Pass& from = into == &copy ? c : v;
      into->cpu_s += from.cpu_s;
      into->sender_cpu_s += from.sender_cpu_s;
      into->wall_s += from.wall_s;
      into->sent += from.sent;
      into->copied += from.copied;
    }
  }
  ::shutdown(sv[0], SHUT_WR);
  drain.join();
  ::close(sv[0]);
  ::close(sv[1]);
  std::error_code ec;
  fs::remove_all(work, ec);

  auto per_gb = [](double x, uint64_t bytes) { return x / (static_cast<double>(bytes) / 1e9); };
  std::printf(
      "{\"bench\":\"store_read_path\",\"version_bytes\":%llu,\"chunk_bytes\":%llu,\"files\":%u,"
      "\"peers\":%d,\"copy_cpu_s_per_gb\":%.4f,\"view_cpu_s_per_gb\":%.4f,"
      "\"view_over_copy_cpu\":%.3f,\"copy_sender_cpu_s_per_gb\":%.4f,"
      "\"view_sender_cpu_s_per_gb\":%.4f,\"view_over_copy_sender_cpu\":%.3f,\"copy_wall_s_per_gb\":"
      "%.4f,\"view_wall_s_per_gb\":%.4f,"
      "\"copy_bytes_copied_per_gb\":%.0f,\"view_bytes_copied_per_gb\":%.0f}\n",
      static_cast<unsigned long long>(size), static_cast<unsigned long long>(chunk), nfiles, peers,
      per_gb(copy.cpu_s, copy.sent), per_gb(view.cpu_s, view.sent),
      copy.cpu_s > 0 ? view.cpu_s / copy.cpu_s : 0.0, per_gb(copy.sender_cpu_s, copy.sent),
      per_gb(view.sender_cpu_s, view.sent),
      copy.sender_cpu_s > 0 ? view.sender_cpu_s / copy.sender_cpu_s : 0.0,
      per_gb(copy.wall_s, copy.sent), per_gb(view.wall_s, view.sent),
      per_gb(static_cast<double>(copy.copied), copy.sent),
      per_gb(static_cast<double>(view.copied), view.sent));
  return 0;
}
