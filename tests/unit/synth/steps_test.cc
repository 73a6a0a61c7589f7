#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "synth/model.h"
#include "unit/synth/test_dir.h"
#include "unit/synth/tiny_shape.h"
#include "util/file.h"

namespace weightcast::synth {
namespace {

using testing::TinyShape;

// A tiny sharded base model in dir/base.
std::filesystem::path WriteBase(const TempDir& dir, DType dtype = DType::kBF16) {
  SynthModelOptions o;
  o.out_dir = dir.path() / "base";
  o.shape = TinyShape();
  o.dtype = dtype;
  o.shard_bytes = 400'000;
  o.threads = 2;
  auto summary = WriteSynthModel(o);
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  return o.out_dir;
}

SynthStepsOptions StepsFrom(const std::filesystem::path& base, const std::filesystem::path& out) {
  SynthStepsOptions o;
  o.from = base;
  o.out_dir = out;
  o.threads = 2;
  return o;
}

TEST(SynthSteps, EveryStepIsACheckpointWithTheSourceLayout) {
  TempDir dir;
  auto base = WriteBase(dir);
  auto o = StepsFrom(base, dir.path() / "steps");
  o.steps = 2;
  auto stats = WriteSynthSteps(o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_EQ(stats->size(), 2u);
  EXPECT_EQ((*stats)[1].dir, dir.path() / "steps" / "step-0002");
  auto source = OpenCheckpoint(base);
  ASSERT_TRUE(source.ok());
  for (const char* step : {"step-0001", "step-0002"}) {
    auto ckpt = OpenCheckpoint(dir.path() / "steps" / step);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    ASSERT_EQ(ckpt->files.size(), source->files.size());
    for (size_t i = 0; i < source->files.size(); ++i) {
      EXPECT_EQ(ckpt->files[i].relative_path, source->files[i].relative_path);
      EXPECT_EQ(ckpt->files[i].size, source->files[i].size);
      EXPECT_EQ(ckpt->files[i].header.data_offset(), source->files[i].header.data_offset());
    }
    EXPECT_EQ(ReadAll(dir.path() / "steps" / step / "config.json"), ReadAll(base / "config.json"));
    EXPECT_EQ(ckpt->weight_map, source->weight_map);
  }
  // Nothing but the step directories is left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path() / "steps"), {}), 2);
}

TEST(SynthSteps, ChangedFractionAtTheDefaultLrIsInThePublishedBand) {
  TempDir dir;
  auto base = WriteBase(dir);
  auto o = StepsFrom(base, dir.path() / "steps");
  o.steps = 3;
  auto stats = WriteSynthSteps(o);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  for (const StepStats& s : *stats) {
    EXPECT_EQ(s.elements, TinyShape().ParamCount());
    EXPECT_GE(s.changed_fraction(), 0.01) << s.step;
    EXPECT_LE(s.changed_fraction(), 0.05) << s.step;
    // Spread over every projection: the busiest tensor is not far from the average.
    EXPECT_LE(s.max_tensor_fraction, 2.5 * s.changed_fraction());
    // Norm weights sit near 1.0, where a bf16 ulp is ~50x wider, so they change least.
    EXPECT_NE(s.min_tensor.find("norm"), std::string::npos) << s.min_tensor;
    // Every matrix takes part: none is far below the average.
    EXPECT_GE(s.min_matrix_fraction, 0.4 * s.changed_fraction()) << s.min_matrix;
    EXPECT_EQ(s.min_matrix.find("norm"), std::string::npos) << s.min_matrix;
  }
}

TEST(SynthSteps, LearningRateIsTheKnob) {
  TempDir dir;
  auto base = WriteBase(dir);
  double previous = 0;
  int run = 0;
  for (double lr : {1e-7, 1e-6, 1e-5}) {
    auto o = StepsFrom(base, dir.path() / ("lr" + std::to_string(run++)));
    o.adam.lr = lr;
    auto stats = WriteSynthSteps(o);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    double f = (*stats)[0].changed_fraction();
    EXPECT_GT(f, previous * 2) << lr;
    previous = f;
  }
  EXPECT_GE(previous, 0.08);  // 1e-5 changes a large share (docs/synth.md)
}

TEST(SynthSteps, StepsAreDeterministicAndIndependentOfHowTheyAreSplit) {
  TempDir dir;
  auto base = WriteBase(dir);
  auto all = StepsFrom(base, dir.path() / "all");
  all.steps = 3;
  all.threads = 1;
  ASSERT_TRUE(WriteSynthSteps(all).ok());
  auto one = StepsFrom(base, dir.path() / "one");
  one.first_step = 3;
  one.threads = 3;
  auto stats = WriteSynthSteps(one);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ((*stats)[0].step, 3u);
  const char* shard = "model-00002-of-00004.safetensors";
  ASSERT_TRUE(std::filesystem::exists(base / shard));
  EXPECT_EQ(ReadAll(dir.path() / "all" / "step-0003" / shard),
            ReadAll(dir.path() / "one" / "step-0003" / shard));
  EXPECT_NE(ReadAll(dir.path() / "all" / "step-0002" / shard),
            ReadAll(dir.path() / "all" / "step-0003" / shard));
}

TEST(SynthSteps, RefusesToOverwriteAStep) {
  TempDir dir;
  auto base = WriteBase(dir);
  auto o = StepsFrom(base, dir.path() / "steps");
  ASSERT_TRUE(WriteSynthSteps(o).ok());
  EXPECT_EQ(WriteSynthSteps(o).status().code(), Code::kAlreadyExists);
}

TEST(SynthSteps, Fp32MastersChangeAlmostEverywhere) {
  TempDir dir;
  auto base = WriteBase(dir, DType::kF32);
  auto stats = WriteSynthSteps(StepsFrom(base, dir.path() / "steps"));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_GT((*stats)[0].changed_fraction(), 0.9);
}

TEST(SynthSteps, EveryStepChangesAboutAsMuchAsTheFirst) {
  // The optimizer starts in its steady state and stored zeros keep their sign, so step 1 is not
  // special; F8 has many zeros, which makes it the sharpest check.
  for (DType dtype : {DType::kBF16, DType::kF8_E4M3}) {
    TempDir dir;
    auto base = WriteBase(dir, dtype);
    auto o = StepsFrom(base, dir.path() / "steps");
    o.steps = 3;
    o.adam.lr = 1e-5;
    auto stats = WriteSynthSteps(o);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    double first = (*stats)[0].changed_fraction();
    EXPECT_GT(first, 0.001) << DTypeName(dtype);
    for (const StepStats& s : *stats) {
      EXPECT_NEAR(s.changed_fraction() / first, 1.0, 0.2) << DTypeName(dtype) << " " << s.step;
    }
  }
}

TEST(SynthSteps, RejectsBadOptions) {
  TempDir dir;
  auto o = StepsFrom(dir.path() / "missing", dir.path() / "steps");
  EXPECT_FALSE(WriteSynthSteps(o).ok());
  o.steps = 0;
  EXPECT_EQ(WriteSynthSteps(o).status().code(), Code::kInvalidArgument);
  o.steps = kMaxStepsPerCall + 1;
  EXPECT_EQ(WriteSynthSteps(o).status().code(), Code::kInvalidArgument);
  o.steps = 1;
  o.adam.lr = -1;
  EXPECT_EQ(WriteSynthSteps(o).status().code(), Code::kInvalidArgument);
}

TEST(SynthSteps, JsonSummaryCarriesEveryStep) {
  std::vector<StepStats> stats(2);
  stats[0].step = 1;
  stats[0].elements = 100;
  stats[0].changed = 2;
  stats[1].step = 2;
  stats[1].elements = 100;
  stats[1].changed = 4;
  auto j = nlohmann::json::parse(StepStatsJson(stats, AdamOptions{}, 5));
  EXPECT_EQ(j["steps"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["mean_changed_fraction"].get<double>(), 0.03);
  EXPECT_DOUBLE_EQ(j["steps"][1]["changed_fraction"].get<double>(), 0.04);
  EXPECT_EQ(j["seed"], 5);
}

}  // namespace
}  // namespace weightcast::synth
