// The RL-like step model (docs/synth.md, "Steps").
//
// Each element carries an fp32 master weight and Adam moments. They are never stored for the
// whole model: the source is walked in slices, and for each slice the state is rebuilt from the
// source value (plus a reproducible sub-ulp residual), advanced step by step with gradients drawn
// from counter-based noise, and each step's cast is appended to that step's file. So memory is
// threads * slice state, and any step is a pure function of (source, seed, options).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>
#include <type_traits>

#include "synth/model.h"
#include "synth/numeric.h"
#include "synth/prng.h"
#include "util/file.h"
#include "util/thread_pool.h"

namespace weightcast::synth {
namespace {

// Elements per slice: the state is 12 bytes per element plus two encoded copies, so a slice
// holds at most 10 MiB (per worker thread).
constexpr uint64_t kSliceElements = 1ull << 19;

struct StepTensor {
  const TensorInfo* info;
  bool updated;  // a float type the model updates; others are copied
  uint64_t name_hash;
  size_t stats_index;  // into the run-wide per-tensor statistics
};

struct Slice {
  size_t tensor;   // index into the file's StepTensor list
  uint64_t first;  // first element (updated tensors) or byte (copied ones)
  uint64_t count;  // elements or bytes
};

// The per-slice state of the step model; reused across batches.
struct SliceState {
  std::vector<float> master;
  std::vector<float> m;
  std::vector<float> v;
  std::vector<uint8_t> prev;  // the encoding of the previous step
  std::vector<uint8_t> cur;   // the encoding of this step
  uint64_t changed = 0;       // elements that differ between prev and cur
};

// Compares one element as an integer load (memcmp would be a library call per element).
template <size_t kBytes>
bool SameBytes(const uint8_t* a, const uint8_t* b) {
  using Word =
      std::conditional_t<kBytes == 1, uint8_t, std::conditional_t<kBytes == 2, uint16_t, uint32_t>>;
  Word x;
  Word y;
  std::memcpy(&x, a, kBytes);
  std::memcpy(&y, b, kBytes);
  return x == y;
}

std::string StepDirName(uint64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%04llu", static_cast<unsigned long long>(step));
  return name;
}

class StepWriter {
 public:
  StepWriter(const SynthStepsOptions& options, ThreadPool& pool, uint64_t last_step)
      : options_(options), pool_(pool), last_step_(last_step) {}

  // Updated tensors' names and element counts, in the order files were processed.
  std::vector<std::string> names;
  std::vector<uint64_t> elements;
  std::vector<bool> is_matrix;
  // changed[k][i]: elements of tensor i that changed at step first_step + k.
  std::vector<std::vector<uint64_t>> changed;

  Status WriteFile(const std::filesystem::path& source, const SafetensorsHeader& header,
                   const std::vector<std::filesystem::path>& destinations) {
    WC_ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(source));
    const uint8_t* data = file.bytes().data() + header.data_offset();

    std::vector<TensorSpec> specs;
    std::vector<StepTensor> tensors;
    for (const TensorInfo& t : header.tensors) {
      specs.push_back(TensorSpec{t.name, t.dtype, t.shape});
      StepTensor st{&t, IsSynthFloatType(t.dtype), HashName(t.name), 0};
      if (st.updated) {
        st.stats_index = names.size();
        names.push_back(t.name);
        elements.push_back(t.byte_size() / SynthElementBytes(t.dtype));
        is_matrix.push_back(t.shape.size() >= 2);
        for (auto& per_step : changed) per_step.push_back(0);
      }
      tensors.push_back(st);
    }
    std::vector<std::unique_ptr<SafetensorsWriter>> writers;
    for (const std::filesystem::path& dest : destinations) {
      // Same tensors, order and metadata as the source, so every step has the same header and
      // the same byte layout: a chunk of step k lines up with the same chunk of step k + 1.
      WC_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> w,
                          SafetensorsWriter::Create(dest, specs, header.metadata));
      writers.push_back(std::move(w));
    }

    std::vector<Slice> slices;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const StepTensor& t = tensors[i];
      uint64_t n =
          t.updated ? t.info->byte_size() / SynthElementBytes(t.info->dtype) : t.info->byte_size();
      uint64_t step = t.updated ? kSliceElements : kSliceElements * 4;
      for (uint64_t first = 0; first < n; first += step) {
        slices.push_back({i, first, std::min(step, n - first)});
      }
    }

    size_t batch = pool_.size();
    std::vector<SliceState> states(batch);
    for (size_t start = 0; start < slices.size(); start += batch) {
      size_t n = std::min(batch, slices.size() - start);
      pool_.ParallelFor(n, [&](size_t j) {
        const Slice& s = slices[start + j];
        if (tensors[s.tensor].updated) Init(tensors[s.tensor], s, data, states[j]);
      });
      for (uint64_t step = 1; step <= last_step_; ++step) {
        bool encode = step + 1 >= options_.first_step;
        pool_.ParallelFor(n, [&](size_t j) {
          const Slice& s = slices[start + j];
          if (tensors[s.tensor].updated) Advance(tensors[s.tensor], s, step, encode, states[j]);
        });
        if (step < options_.first_step) continue;
        size_t k = step - options_.first_step;
        for (size_t j = 0; j < n; ++j) {
          const Slice& s = slices[start + j];
          const StepTensor& t = tensors[s.tensor];
          if (t.updated) {
            WC_RETURN_IF_ERROR(writers[k]->Append(states[j].prev));
            changed[k][t.stats_index] += states[j].changed;
          } else {
            WC_RETURN_IF_ERROR(writers[k]->Append({data + t.info->begin + s.first, s.count}));
          }
        }
      }
    }
    for (auto& w : writers) WC_RETURN_IF_ERROR(w->Finish());
    return Status::Ok();
  }

 private:
  void Init(const StepTensor& t, const Slice& s, const uint8_t* data, SliceState& state) const {
    DType dtype = t.info->dtype;
    size_t eb = SynthElementBytes(dtype);
    const uint8_t* src = data + t.info->begin + s.first * eb;
    state.master.resize(s.count);
    state.m.resize(s.count);
    state.v.resize(s.count);
    state.prev.assign(src, src + s.count * eb);
    state.cur.resize(s.count * eb);
    const AdamOptions& adam = options_.adam;
    InitParams p;
    p.residual_key = StreamKey(options_.seed, t.name_hash, Stream::kResidual);
    p.signal_key = StreamKey(options_.seed, t.name_hash, Stream::kGradSignal);
    p.moment_key = StreamKey(options_.seed, t.name_hash, Stream::kMomentInit);
    p.signal = static_cast<float>(adam.signal);
    // The first moment's steady-state spread around the signal under pure unit noise.
    p.m_spread = static_cast<float>(std::sqrt((1 - adam.beta1) / (1 + adam.beta1)));
    p.zero_half_gap = 0.5f * SmallestPositive(dtype);
    switch (dtype) {
      case DType::kBF16:
        return InitTyped<DType::kBF16>(p, s, src, state);
      case DType::kF16:
        return InitTyped<DType::kF16>(p, s, src, state);
      case DType::kF8_E4M3:
        return InitTyped<DType::kF8_E4M3>(p, s, src, state);
      default:
        return InitTyped<DType::kF32>(p, s, src, state);
    }
  }

  struct InitParams {
    uint64_t residual_key;
    uint64_t signal_key;
    uint64_t moment_key;
    float signal, m_spread, zero_half_gap;
  };

  // Rebuilds the optimizer state of a slice before step 1; templated like AdvanceTyped.
  template <DType kType>
  static void InitTyped(const InitParams& p, const Slice& s, const uint8_t* src,
                        SliceState& state) {
    constexpr size_t kBytes = kType == DType::kF8_E4M3 ? 1 : kType == DType::kF32 ? 4 : 2;
    for (uint64_t i = 0; i < s.count; ++i) {
      uint64_t e = s.first + i;
      float base = DecodeElement(kType, src + i * kBytes);
      // Uniform over the whole rounding cell of `base`: a margin at its edges, even 0.1% of it,
      // would be as wide as a step's update at low precision and visibly lower step 1's changed
      // fraction. A stored zero keeps its sign: the master sits on that side of zero, so the first
      // update does not flip -0/+0 for half of all zeros.
      float u = Uniform01(RandomAt(p.residual_key, e)) * 2.0f - 1.0f;
      float master;
      if (base == 0.0f) {
        master = std::copysign(std::fabs(u) * p.zero_half_gap, base);
      } else {
        RoundingCell cell = CellAround(kType, base);
        master = base - cell.below + (u * 0.5f + 0.5f) * (cell.below + cell.above);
      }
      uint8_t check[4];
      EncodeElement(kType, master, check);
      // A draw landing exactly on the cell's edge may round away (ties); keep the stored value.
      if (!SameBytes<kBytes>(check, src + i * kBytes)) master = base;
      state.master[i] = master;
      float g_mean = p.signal * NormalIsh(RandomAt(p.signal_key, e));
      state.m[i] = g_mean + p.m_spread * NormalIsh(RandomAt(p.moment_key, e));
      state.v[i] = g_mean * g_mean + 1.0f;
    }
  }

  void Advance(const StepTensor& t, const Slice& s, uint64_t step, bool encode,
               SliceState& state) const {
    const AdamOptions& adam = options_.adam;
    AdamStep a;
    a.signal_key = StreamKey(options_.seed, t.name_hash, Stream::kGradSignal);
    a.noise_key = StreamKey(options_.seed, t.name_hash, Stream::kGradNoise, step);
    a.signal = static_cast<float>(adam.signal);
    a.b1 = static_cast<float>(adam.beta1);
    a.b2 = static_cast<float>(adam.beta2);
    a.lr = static_cast<float>(adam.lr);
    a.eps = static_cast<float>(adam.eps);
    a.decay = static_cast<float>(adam.lr * adam.weight_decay);
    switch (t.info->dtype) {
      case DType::kBF16:
        return AdvanceTyped<DType::kBF16>(a, s, encode, state);
      case DType::kF16:
        return AdvanceTyped<DType::kF16>(a, s, encode, state);
      case DType::kF8_E4M3:
        return AdvanceTyped<DType::kF8_E4M3>(a, s, encode, state);
      default:
        return AdvanceTyped<DType::kF32>(a, s, encode, state);
    }
  }

  struct AdamStep {
    uint64_t signal_key;
    uint64_t noise_key;
    float signal, b1, b2, lr, eps, decay;
  };

  // One Adam step over a slice. Templated on the type so that encoding and comparing an element
  // compile to a few instructions instead of a switch and a memcmp call each.
  template <DType kType>
  static void AdvanceTyped(const AdamStep& a, const Slice& s, bool encode, SliceState& state) {
    constexpr size_t kBytes = kType == DType::kF8_E4M3 ? 1 : kType == DType::kF32 ? 4 : 2;
    uint64_t changed = 0;
    for (uint64_t i = 0; i < s.count; ++i) {
      uint64_t e = s.first + i;
      float g =
          a.signal * NormalIsh(RandomAt(a.signal_key, e)) + NormalIsh(RandomAt(a.noise_key, e));
      float m = a.b1 * state.m[i] + (1 - a.b1) * g;
      float v = a.b2 * state.v[i] + (1 - a.b2) * g * g;
      state.m[i] = m;
      state.v[i] = v;
      float w = state.master[i];
      w -= a.lr * m / (std::sqrt(v) + a.eps) + a.decay * w;
      state.master[i] = w;
      if (encode) {
        uint8_t* out = state.cur.data() + i * kBytes;
        EncodeElement(kType, w, out);
        changed += !SameBytes<kBytes>(out, state.prev.data() + i * kBytes);
      }
    }
    if (encode) {
      state.prev.swap(state.cur);
      state.changed = changed;
    }
  }

  const SynthStepsOptions& options_;
  ThreadPool& pool_;
  uint64_t last_step_;
};

Status CheckOptions(const SynthStepsOptions& o) {
  if (o.first_step == 0) return InvalidArgument("steps are numbered from 1");
  if (o.steps == 0) return InvalidArgument("--steps must be at least 1");
  // One writer (a file descriptor and up to 1 MiB of buffer) is open per step being written.
  if (o.steps > kMaxStepsPerCall) {
    return InvalidArgument("at most " + std::to_string(kMaxStepsPerCall) +
                           " steps per call; write later ones with a higher first step");
  }
  if (o.first_step > 100'000'000) return InvalidArgument("steps are numbered below 1e8");
  const AdamOptions& a = o.adam;
  if (!(std::isfinite(a.lr) && a.lr >= 0 && a.lr < 1)) {
    return InvalidArgument("learning rate must be in [0, 1)");
  }
  if (!(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1)) {
    return InvalidArgument("Adam betas must be in [0, 1)");
  }
  if (!(std::isfinite(a.eps) && a.eps > 0 && std::isfinite(a.signal) && a.signal >= 0 &&
        std::isfinite(a.weight_decay) && a.weight_decay >= 0)) {
    return InvalidArgument("Adam eps must be positive; signal and weight decay non-negative");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<StepStats>> WriteSynthSteps(const SynthStepsOptions& options) {
  WC_RETURN_IF_ERROR(CheckOptions(options));
  WC_ASSIGN_OR_RETURN(Checkpoint checkpoint, OpenCheckpoint(options.from));
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  if (ec) return IoError("mkdir(" + options.out_dir.string() + "): " + ec.message());

  uint64_t last_step = options.first_step + options.steps - 1;
  std::vector<std::filesystem::path> finals;
  std::vector<std::filesystem::path> stagings;
  for (uint64_t step = options.first_step; step <= last_step; ++step) {
    std::filesystem::path final_dir = options.out_dir / StepDirName(step);
    if (std::filesystem::exists(final_dir, ec)) {
      return AlreadyExists(final_dir.string() + ": step already written");
    }
    // A leftover from an interrupted run is ours to discard: it was never made visible.
    std::filesystem::path staging = options.out_dir / ("." + StepDirName(step) + ".partial");
    std::filesystem::remove_all(staging, ec);
    std::filesystem::create_directories(staging, ec);
    if (ec) return IoError("mkdir(" + staging.string() + "): " + ec.message());
    finals.push_back(final_dir);
    stagings.push_back(staging);
  }

  ThreadPool pool(options.threads);
  StepWriter writer(options, pool, last_step);
  writer.changed.resize(options.steps);
  for (const CheckpointFile& f : checkpoint.files) {
    std::filesystem::path source = checkpoint.root / f.relative_path;
    std::vector<std::filesystem::path> destinations;
    for (const std::filesystem::path& staging : stagings) {
      std::filesystem::path dest = staging / f.relative_path;
      std::filesystem::create_directories(dest.parent_path(), ec);
      if (ec) return IoError("mkdir(" + dest.parent_path().string() + "): " + ec.message());
      destinations.push_back(dest);
    }
    if (f.is_safetensors) {
      WC_RETURN_IF_ERROR(
          writer.WriteFile(source, f.header, destinations).WithContext(f.relative_path));
      continue;
    }
    for (const std::filesystem::path& dest : destinations) {
      std::filesystem::copy_file(source, dest, ec);
      if (ec) return IoError("copy(" + source.string() + "): " + ec.message());
      WC_RETURN_IF_ERROR(FsyncPath(dest));
    }
  }

  std::vector<StepStats> stats;
  for (size_t k = 0; k < options.steps; ++k) {
    WC_RETURN_IF_ERROR(FsyncPath(stagings[k]));
    std::filesystem::rename(stagings[k], finals[k], ec);
    if (ec) return IoError("rename(" + stagings[k].string() + "): " + ec.message());
    StepStats s;
    s.step = options.first_step + k;
    s.dir = finals[k];
    bool any = false;
    bool any_matrix = false;
    for (size_t i = 0; i < writer.names.size(); ++i) {
      uint64_t n = writer.elements[i];
      uint64_t c = writer.changed[k][i];
      s.elements += n;
      s.changed += c;
      if (n == 0) continue;
      double fraction = static_cast<double>(c) / static_cast<double>(n);
      if (!any || fraction < s.min_tensor_fraction) {
        s.min_tensor_fraction = fraction;
        s.min_tensor = writer.names[i];
      }
      if (!any || fraction > s.max_tensor_fraction) {
        s.max_tensor_fraction = fraction;
        s.max_tensor = writer.names[i];
      }
      any = true;
      if (writer.is_matrix[i] && (!any_matrix || fraction < s.min_matrix_fraction)) {
        s.min_matrix_fraction = fraction;
        s.min_matrix = writer.names[i];
        any_matrix = true;
      }
    }
    stats.push_back(std::move(s));
  }
  WC_RETURN_IF_ERROR(FsyncPath(options.out_dir));
  return stats;
}

std::string StepStatsJson(const std::vector<StepStats>& stats, const AdamOptions& adam,
                          uint64_t seed) {
  nlohmann::ordered_json out;
  out["lr"] = adam.lr;
  out["seed"] = seed;
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  double sum = 0;
  double lo = 1;
  double hi = 0;
  for (const StepStats& s : stats) {
    nlohmann::ordered_json j;
    j["step"] = s.step;
    j["elements"] = s.elements;
    j["changed"] = s.changed;
    j["changed_fraction"] = s.changed_fraction();
    j["min_tensor_fraction"] = s.min_tensor_fraction;
    j["min_tensor"] = s.min_tensor;
    j["max_tensor_fraction"] = s.max_tensor_fraction;
    j["max_tensor"] = s.max_tensor;
    j["min_matrix_fraction"] = s.min_matrix_fraction;
    j["min_matrix"] = s.min_matrix;
    steps.push_back(std::move(j));
    sum += s.changed_fraction();
    lo = std::min(lo, s.changed_fraction());
    hi = std::max(hi, s.changed_fraction());
  }
  out["mean_changed_fraction"] = stats.empty() ? 0.0 : sum / static_cast<double>(stats.size());
  out["min_step_fraction"] = stats.empty() ? 0.0 : lo;
  out["max_step_fraction"] = stats.empty() ? 0.0 : hi;
  out["steps"] = std::move(steps);
  return out.dump();
}

}  // namespace weightcast::synth
