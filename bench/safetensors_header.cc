// How much the strict safetensors header parser costs over a plain JSON parse of the same header.
// Reference: nlohmann::json::parse of the header text (what a lenient reader does), measured in
// the same run. The header is Llama-shaped: `--tensors N` entries (default 100000, about 10 MB).
// Last line: one JSON object with both throughputs and their ratio.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format/safetensors.h"

namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> MakeFile(int tensors, uint64_t* header_bytes) {
  const char* kinds[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                         "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                         "mlp.gate_proj.weight",    "mlp.up_proj.weight",
                         "mlp.down_proj.weight",    "input_layernorm.weight"};
  std::string header = R"({"__metadata__":{"format":"pt"})";
  uint64_t offset = 0;
  for (int i = 0; i < tensors; ++i) {
    const uint64_t bytes = 2 * 64;  // BF16 [8, 8]: the data is not what is measured
    header += ",\"model.layers." + std::to_string(i / 8) + "." + kinds[i % 8] +
              "\":{\"dtype\":\"BF16\",\"shape\":[8,8],\"data_offsets\":[" + std::to_string(offset) +
              "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}";
  header.resize((header.size() + 7) / 8 * 8, ' ');
  *header_bytes = header.size();
  std::vector<uint8_t> file(8 + header.size() + offset, 0);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i));
  std::memcpy(file.data() + 8, header.data(), header.size());
  return file;
}

template <typename Fn>
double BestSeconds(int reps, Fn&& fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int tensors = 100000;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tensors") == 0) tensors = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--reps") == 0) reps = std::atoi(argv[i + 1]);
  }
  uint64_t header_bytes = 0;
  const std::vector<uint8_t> file = MakeFile(tensors, &header_bytes);
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), header_bytes);

  size_t sink = 0;
  const double plain = BestSeconds(reps, [&] {
    nlohmann::json j = nlohmann::json::parse(text);
    sink += j.size();
  });
  const double strict = BestSeconds(reps, [&] {
    auto header = weightcast::ParseSafetensorsHeader(file, file.size(), "bench");
    if (!header.ok()) {
      std::fprintf(stderr, "%s\n", header.status().ToString().c_str());
      std::exit(1);
    }
    sink += header->tensors.size();
  });
  const double mb = static_cast<double>(header_bytes) / 1e6;
  std::printf("header %.1f MB, %d tensors: nlohmann::json::parse %.3f s, strict parse %.3f s\n", mb,
              tensors, plain, strict);
  std::printf(
      "{\"bench\":\"safetensors_header\",\"tensors\":%d,\"header_mb\":%.2f,"
      "\"nlohmann_parse_mb_s\":%.1f,\"strict_parse_mb_s\":%.1f,\"strict_over_nlohmann_time\":%.2f,"
      "\"sink\":%zu}\n",
      tensors, mb, mb / plain, mb / strict, strict / plain, sink);
  return 0;
}
