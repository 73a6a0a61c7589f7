#include "synth/model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <system_error>

#include "synth/numeric.h"
#include "synth/values.h"
#include "util/file.h"
#include "util/thread_pool.h"

namespace weightcast::synth {
namespace {

// Each worker fills one buffer of at most this size at a time, so generation holds
// threads * kSliceBytes however large the model.
constexpr uint64_t kSliceBytes = 4ull << 20;

struct Slice {
  size_t tensor;   // index into the shard's tensor list
  uint64_t first;  // first element
  uint64_t count;  // elements
};

std::vector<Slice> CutSlices(const std::vector<TensorSpec>& tensors, uint64_t slice_elements) {
  std::vector<Slice> slices;
  for (size_t t = 0; t < tensors.size(); ++t) {
    uint64_t n = 1;
    for (uint64_t d : tensors[t].shape) n *= d;
    for (uint64_t first = 0; first < n; first += slice_elements) {
      slices.push_back({t, first, std::min(slice_elements, n - first)});
    }
  }
  return slices;
}

Status PrepareOutputDir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec)) {
    if (!std::filesystem::is_directory(dir, ec)) {
      return AlreadyExists(dir.string() + ": exists and is not a directory");
    }
    if (!std::filesystem::is_empty(dir, ec)) {
      return AlreadyExists(dir.string() + ": directory is not empty; refusing to mix checkpoints");
    }
    return Status::Ok();
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("mkdir(" + dir.string() + "): " + ec.message());
  return Status::Ok();
}

Status WriteShard(const std::filesystem::path& path, const std::vector<TensorSpec>& tensors,
                  DType dtype, uint64_t seed, ThreadPool& pool) {
  WC_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer,
                      SafetensorsWriter::Create(path, tensors, {{"format", "pt"}}));
  size_t element_bytes = SynthElementBytes(dtype);
  std::vector<Slice> slices = CutSlices(tensors, kSliceBytes / element_bytes);
  std::vector<TensorInit> inits;
  inits.reserve(tensors.size());
  for (const TensorSpec& t : tensors) inits.push_back(InitFor(seed, t.name));

  // Invariant: buffers.size() == batch; one batch is generated in parallel, then appended in
  // layout order before the next starts.
  size_t batch = pool.size();
  std::vector<std::vector<uint8_t>> buffers(batch);
  for (size_t start = 0; start < slices.size(); start += batch) {
    size_t n = std::min(batch, slices.size() - start);
    pool.ParallelFor(n, [&](size_t j) {
      const Slice& s = slices[start + j];
      buffers[j].resize(s.count * element_bytes);
      GenerateValues(seed, inits[s.tensor], dtype, s.first, buffers[j]);
    });
    for (size_t j = 0; j < n; ++j) WC_RETURN_IF_ERROR(writer->Append(buffers[j]));
  }
  return writer->Finish();
}

std::string ShardName(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

uint64_t TensorBytes(const TensorSpec& t) {
  uint64_t n = SynthElementBytes(t.dtype);
  for (uint64_t d : t.shape) n *= d;
  return n;
}

}  // namespace

Result<SynthModelSummary> WriteSynthModel(const SynthModelOptions& options) {
  if (!IsSynthFloatType(options.dtype)) {
    return InvalidArgument("synthetic models are BF16, F16, F32 or F8_E4M3, not " +
                           std::string(DTypeName(options.dtype)));
  }
  if (options.shard_bytes == 0) return InvalidArgument("shard size must be positive");
  SynthModelSummary summary;
  if (options.shape.has_value()) {
    WC_RETURN_IF_ERROR(ValidateModelShape(*options.shape));
    summary.shape = *options.shape;
  } else {
    WC_ASSIGN_OR_RETURN(summary.shape, PickModelShape(options.target_bytes, options.dtype));
  }
  WC_RETURN_IF_ERROR(PrepareOutputDir(options.out_dir));

  std::vector<TensorSpec> tensors = ModelTensors(summary.shape, options.dtype);
  summary.tensors = tensors.size();
  // Greedy packing in model order, as Hugging Face's save_pretrained does.
  std::vector<std::vector<TensorSpec>> shards(1);
  uint64_t shard_fill = 0;
  for (TensorSpec& t : tensors) {
    uint64_t bytes = TensorBytes(t);
    summary.tensor_bytes += bytes;
    if (!shards.back().empty() && shard_fill + bytes > options.shard_bytes) {
      shards.emplace_back();
      shard_fill = 0;
    }
    shards.back().push_back(std::move(t));
    shard_fill += bytes;
  }

  Status st = WriteFileAtomic(options.out_dir / "config.json",
                              ModelConfigJson(summary.shape, options.dtype, options.seed));
  WC_RETURN_IF_ERROR(st);
  summary.files.push_back("config.json");

  ThreadPool pool(options.threads);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    std::string name = shards.size() == 1 ? "model.safetensors" : ShardName(i, shards.size());
    WC_RETURN_IF_ERROR(
        WriteShard(options.out_dir / name, shards[i], options.dtype, options.seed, pool));
    for (const TensorSpec& t : shards[i]) weight_map[t.name] = name;
    summary.files.push_back(name);
  }
  if (shards.size() > 1) {
    nlohmann::json index;
    index["metadata"] = {{"total_size", summary.tensor_bytes}};
    index["weight_map"] = std::move(weight_map);
    WC_RETURN_IF_ERROR(
        WriteFileAtomic(options.out_dir / "model.safetensors.index.json", index.dump(2) + "\n"));
    summary.files.push_back("model.safetensors.index.json");
  }
  for (const std::string& f : summary.files) {
    std::error_code ec;
    uint64_t size = std::filesystem::file_size(options.out_dir / f, ec);
    if (ec) return IoError("stat(" + (options.out_dir / f).string() + "): " + ec.message());
    summary.file_bytes += size;
  }
  return summary;
}

}  // namespace weightcast::synth
