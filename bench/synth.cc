// Synthetic checkpoint throughput: `weightcast synth model` and `synth steps` against the
// reference of writing the same number of bytes to the same disk (write + fsync of a prepared
// buffer: the floor for any checkpoint writer), and the value generator on one core against
// memcpy on one core.
//
//   bench_synth [--mib 256] [--threads 0] [--dir /tmp] [--steps 1]
//
// Last line: one JSON object. GB/s are decimal (1e9 bytes per second). Both wall-clock and
// per-CPU-second figures are given: on a shared machine only the latter measure the work.
#include <fcntl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "synth/model.h"
#include "synth/values.h"
#include "util/file.h"

using namespace weightcast;

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds of the whole process (all threads, user + system). On a machine shared with other
// work, wall time measures the scheduler; CPU time measures the work.
double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
  };
  return sec(ru.ru_utime) + sec(ru.ru_stime);
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Writes `bytes` from a prepared 16 MiB buffer and fsyncs: what any writer of this many bytes
// pays on this disk at least.
double WriteReference(const std::filesystem::path& path, uint64_t bytes, double* cpu_gbps) {
  std::vector<uint8_t> buf(16 << 20);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(buf.data() + i, &v, 8);
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return 0;
  double cpu0 = ProcessCpuSeconds();
  auto start = Clock::now();
  for (uint64_t done = 0; done < bytes;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), bytes - done));
    if (!WriteAll(fd, {buf.data(), n}, path.string()).ok()) break;
    done += n;
  }
  ::fsync(fd);
  double seconds = Since(start);
  *cpu_gbps = static_cast<double>(bytes) / (ProcessCpuSeconds() - cpu0) / 1e9;
  ::close(fd);
  std::filesystem::remove(path);
  return static_cast<double>(bytes) / seconds / 1e9;
}

double MemcpyGbps() {
  std::vector<uint8_t> a(64 << 20, 1);
  std::vector<uint8_t> b(64 << 20, 2);
  std::memcpy(b.data(), a.data(), a.size());  // fault the pages in
  double start = ThreadCpuSeconds();
  int rounds = 0;
  while (ThreadCpuSeconds() - start < 0.5) {
    std::memcpy(b.data(), a.data(), a.size());
    a[rounds % a.size()] = b[(rounds * 7) % b.size()];
    ++rounds;
  }
  return static_cast<double>(a.size()) * rounds / (ThreadCpuSeconds() - start) / 1e9;
}

double GenerateCoreGbps() {
  std::vector<uint8_t> out(64 << 20);
  synth::TensorInit init = synth::InitFor(0, "model.layers.0.mlp.up_proj.weight");
  double start = ThreadCpuSeconds();
  int rounds = 0;
  while (ThreadCpuSeconds() - start < 0.5) {
    synth::GenerateValues(0, init, DType::kBF16, static_cast<uint64_t>(rounds) * out.size() / 2,
                          out);
    ++rounds;
  }
  return static_cast<double>(out.size()) * rounds / (ThreadCpuSeconds() - start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 256;
  size_t threads = 0;
  uint64_t steps = 1;
  std::filesystem::path dir = std::filesystem::temp_directory_path();
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--mib") mib = std::stoull(argv[i + 1]);
    if (flag == "--threads") threads = std::stoul(argv[i + 1]);
    if (flag == "--steps") steps = std::stoull(argv[i + 1]);
    if (flag == "--dir") dir = argv[i + 1];
  }
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  std::random_device rd;
  std::filesystem::path root = dir / ("wc_bench_synth_" + std::to_string(rd()));
  std::filesystem::create_directories(root);

  uint64_t bytes = mib << 20;
  double write_cpu_gbps = 0;
  double write_gbps = WriteReference(root / "reference", bytes, &write_cpu_gbps);
  double memcpy_gbps = MemcpyGbps();
  double gen_gbps = GenerateCoreGbps();

  synth::SynthModelOptions model;
  model.out_dir = root / "model";
  model.target_bytes = bytes;
  model.threads = threads;
  double cpu0 = ProcessCpuSeconds();
  auto start = Clock::now();
  auto summary = synth::WriteSynthModel(model);
  double model_seconds = Since(start);
  double model_cpu = ProcessCpuSeconds() - cpu0;
  if (!summary.ok()) {
    std::fprintf(stderr, "synth model: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  double model_gbps = static_cast<double>(summary->file_bytes) / model_seconds / 1e9;
  double model_cpu_gbps = static_cast<double>(summary->file_bytes) / model_cpu / 1e9;
  std::printf("model: %.1f MB in %.2f s wall, %.2f s CPU = %.3f GB/s per CPU-second\n",
              summary->file_bytes / 1e6, model_seconds, model_cpu, model_cpu_gbps);

  synth::SynthStepsOptions step;
  step.from = model.out_dir;
  step.out_dir = root / "steps";
  step.steps = steps;
  step.threads = threads;
  cpu0 = ProcessCpuSeconds();
  start = Clock::now();
  auto stats = synth::WriteSynthSteps(step);
  double step_seconds = Since(start);
  double step_cpu = ProcessCpuSeconds() - cpu0;
  if (!stats.ok()) {
    std::fprintf(stderr, "synth steps: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  double step_gbps =
      static_cast<double>(summary->file_bytes) * static_cast<double>(steps) / step_seconds / 1e9;
  double changed = stats->front().changed_fraction();
  double step_cpu_gbps =
      static_cast<double>(summary->file_bytes) * static_cast<double>(steps) / step_cpu / 1e9;
  double elements = static_cast<double>(stats->front().elements) * static_cast<double>(steps);
  std::printf(
      "steps: %llu x %.1f MB in %.2f s wall, %.2f s CPU = %.3f GB/s per CPU-second, %.1f ns "
      "CPU per element, %.2f%% changed\n",
      static_cast<unsigned long long>(steps), summary->file_bytes / 1e6, step_seconds, step_cpu,
      step_cpu_gbps, step_cpu / elements * 1e9, changed * 100);
  std::printf("reference write+fsync: %.3f GB/s wall, %.3f GB/s per CPU-second\n", write_gbps,
              write_cpu_gbps);
  std::printf("generator: %.3f GB/s per core, memcpy %.3f GB/s per core (ratio %.3f)\n", gen_gbps,
              memcpy_gbps, gen_gbps / memcpy_gbps);
  std::filesystem::remove_all(root);

  std::printf(
      "{\"bench\":\"synth\",\"mib\":%llu,\"threads\":%zu,\"steps\":%llu,"
      "\"write_gbps\":%.4f,\"write_cpu_gbps\":%.4f,\"model_gbps\":%.4f,\"model_cpu_gbps\":%.4f,"
      "\"model_cpu_vs_write_cpu\":%.3f,\"model_vs_write\":%.3f,\"step_gbps\":%.4f,"
      "\"step_cpu_gbps\":%.4f,\"step_cpu_ns_per_element\":%.2f,\"step_vs_write\":%.3f,"
      "\"changed_fraction\":%.5f,\"generator_core_gbps\":%.4f,\"memcpy_core_gbps\":%.4f,"
      "\"generator_vs_memcpy\":%.4f}\n",
      static_cast<unsigned long long>(mib), threads, static_cast<unsigned long long>(steps),
      write_gbps, write_cpu_gbps, model_gbps, model_cpu_gbps, model_cpu_gbps / write_cpu_gbps,
      model_gbps / write_gbps, step_gbps, step_cpu_gbps, step_cpu / elements * 1e9,
      step_gbps / write_gbps, changed, gen_gbps, memcpy_gbps, gen_gbps / memcpy_gbps);
  return 0;
}
