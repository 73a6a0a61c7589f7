// Is it worth receiving a chunk straight into its staging file? (docs/transport_ucx.md,
// "Receiving into the staging"). A thread sends BYTES over a Unix socket in CHUNK pieces from a
// warm buffer; the receiving thread takes them three ways, in the same run, into a fresh
// staging file each time (the file is created, sized, and fsynced at the end, as a staging is):
//   frame+pwrite: recv into a frame body from net::Bytes (the pool: warm, reused pages), then
//                 pwrite to the staging file: what an agent does today (one extra user copy);
//   mapping:      recv straight into a MAP_SHARED mapping of the staging file: what receiving
//                 into the staging buffer would do (no user copy; each page faulted in);
//   frame only:   recv into the frame body, no staging write: the reference (the socket alone).
// Reports the receiving thread's CPU seconds (user + sys) per GB and the wall time of each (each
// way run twice, A B B A, after a sync).
//
//   bench_staging_receive [bytes=1GiB] [chunk=4MiB] [dir=.]
// Last line: one JSON object.
#include <fcntl.h>
#include <sys/mman.h>
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

#include "net/frame.h"
#include "util/text.h"

namespace {

double ThreadCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_THREAD, &ru);
  auto s = [](const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

bool RecvAll(int fd, uint8_t* into, size_t n) {
  while (n > 0) {
    const ssize_t got = recv(fd, into, n, MSG_WAITALL);
    if (got <= 0) return false;
    into += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

struct Figures {
  double wall = 0, cpu = 0;
};

enum class Way { kFramePwrite, kMapping, kFrameOnly };

Figures Run(Way way, uint64_t bytes, uint64_t chunk, const std::filesystem::path& dir) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::exit(1);
  std::thread sender([&] {
    std::vector<uint8_t> buffer(chunk, 0x5a);
    for (uint64_t sent = 0; sent < bytes;) {
      const size_t n = std::min<uint64_t>(chunk, bytes - sent);
      for (size_t off = 0; off < n;) {
        const ssize_t w = send(sv[0], buffer.data() + off, n - off, 0);
        if (w <= 0) std::exit(1);
        off += static_cast<size_t>(w);
      }
      sent += n;
    }
  });
  const std::filesystem::path file = dir / "staging_receive.tmp";
  ::sync();  // the last run's dirty pages are not this run's to write back
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = ThreadCpuSeconds();
  int fd = -1;
  uint8_t* mapping = nullptr;
  if (way != Way::kFrameOnly) {
    fd = open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::exit(1);
  }
  if (way == Way::kMapping) {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) std::exit(1);
    mapping = static_cast<uint8_t*>(m);
  }
  for (uint64_t got = 0; got < bytes;) {
    const size_t n = std::min<uint64_t>(chunk, bytes - got);
    if (way == Way::kMapping) {
      if (!RecvAll(sv[1], mapping + got, n)) std::exit(1);
    } else {
      weightcast::net::Bytes body(weightcast::net::kChunkHeaderSize + n);
      uint8_t* payload = body.data() + weightcast::net::kChunkHeaderSize;
      if (!RecvAll(sv[1], payload, n)) std::exit(1);
      if (way == Way::kFramePwrite &&
          pwrite(fd, payload, n, static_cast<off_t>(got)) != static_cast<ssize_t>(n)) {
        std::exit(1);
      }
    }
    got += n;
  }
  if (mapping != nullptr) munmap(mapping, bytes);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  Figures f{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
            ThreadCpuSeconds() - c0};
  sender.join();
  close(sv[0]);
  close(sv[1]);
  std::filesystem::remove(file);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  auto size_arg = [&](int i, const char* fallback) {
    auto parsed = weightcast::ParseSize(argc > i ? argv[i] : fallback);
    if (!parsed.ok()) {
      std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
      std::exit(2);
    }
    return *parsed;
  };
  const uint64_t bytes = size_arg(1, "1GiB");
  const uint64_t chunk = size_arg(2, "4MiB");
  const std::filesystem::path dir = argc > 3 ? argv[3] : ".";
  if (chunk == 0 || chunk > bytes) {
    std::fprintf(stderr, "chunk must be between 1 byte and the total\n");
    return 2;
  }
  // Warm-up: the pool's first blocks, the page cache's first pages.
  Run(Way::kFrameOnly, std::min<uint64_t>(bytes, 64ull << 20), chunk, dir);
  // Each staging way twice, in the order A B B A, so that a drift of the machine's state
  // (writeback, page cache) does not favour one; the figures are the sums.
  auto plus = [](Figures a, Figures b) { return Figures{a.wall + b.wall, a.cpu + b.cpu}; };
  Figures pw = Run(Way::kFramePwrite, bytes, chunk, dir);
  Figures mp = Run(Way::kMapping, bytes, chunk, dir);
  mp = plus(mp, Run(Way::kMapping, bytes, chunk, dir));
  pw = plus(pw, Run(Way::kFramePwrite, bytes, chunk, dir));
  Figures fo =
      plus(Run(Way::kFrameOnly, bytes, chunk, dir), Run(Way::kFrameOnly, bytes, chunk, dir));
  const double gb = 2 * bytes / 1e9;
  std::printf("frame+pwrite: %.3f s, %.3f cpu s/GB\n", pw.wall, pw.cpu / gb);
  std::printf("mapping:      %.3f s, %.3f cpu s/GB\n", mp.wall, mp.cpu / gb);
  std::printf("frame only:   %.3f s, %.3f cpu s/GB\n", fo.wall, fo.cpu / gb);
  std::printf(
      "{\"bench\":\"staging_receive\",\"bytes\":%llu,\"chunk\":%llu,"
      "\"frame_pwrite_s\":%.4f,\"mapping_s\":%.4f,\"frame_only_s\":%.4f,"
      "\"frame_pwrite_cpu_s_per_gb\":%.4f,\"mapping_cpu_s_per_gb\":%.4f,"
      "\"frame_only_cpu_s_per_gb\":%.4f,\"mapping_vs_frame_pwrite_cpu\":%.3f}\n",
      static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(chunk), pw.wall,
      mp.wall, fo.wall, pw.cpu / gb, mp.cpu / gb, fo.cpu / gb, mp.cpu / pw.cpu);
  return 0;
}
