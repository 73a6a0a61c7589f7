#include "live/live_set.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "format/safetensors.h"
#include "live/delta_file.h"
#include "live/store_view.h"
#include "live_test_util.h"
#include "manifest/attestation.h"
#include "publish/version_builder.h"
#include "store/store.h"
#include "testing/temp_dir.h"

namespace weightcast::live {
namespace {

using namespace ::weightcast::live::testing;  // NOLINT(google-build-using-namespace)

// A sampler that serves only tensor "b", from `b`.
Result<std::unique_ptr<LiveSet>> OnlyB(std::vector<float>& b) {
  std::vector<LiveTensor> t = {
      {"b", DType::kF32, {1000}, {reinterpret_cast<uint8_t*>(b.data()), b.size() * 4}}};
  return LiveSet::Create(std::move(t));
}

TEST(LiveSet, AFirstApplyCopiesEverythingAndVerifies) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  auto r = ApplyFromStore(f.root, "policy", v1, *live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(live.Equals(f.model));
  EXPECT_FALSE(r->delta);
  EXPECT_GT(r->chunks_copied, 0u);
  EXPECT_EQ(live.set->version(), v1);
}

TEST(LiveSet, ADeltaIsPatchedInPlaceTouchingOnlyPayloads) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  Step(f.model, 1);
  const Version v2 = f.Publish();
  auto r = ApplyFromStore(f.root, "policy", v2, *live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->delta) << r->note;
  EXPECT_GT(r->chunks_patched, 0u);
  EXPECT_EQ(r->chunks_copied, 0u);
  EXPECT_EQ(r->chunks_repaired, 0u);
  EXPECT_EQ(r->copied_bytes, 0u);
  EXPECT_GT(r->payload_bytes, 0u);
  EXPECT_TRUE(live.Equals(f.model));
  EXPECT_EQ(live.set->version(), v2);
}

TEST(LiveSet, AChainOfDeltasBringsASecondBufferTwoVersionsBehind) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  Step(f.model, 1);
  f.Publish();
  Step(f.model, 2);
  const Version v3 = f.Publish();
  auto r = ApplyFromStore(f.root, "policy", v3, *live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->delta) << r->note;
  EXPECT_EQ(r->chunks_copied + r->chunks_repaired, 0u);
  EXPECT_TRUE(live.Equals(f.model));
}

TEST(LiveSet, WithoutTheDeltasBaseOnlyTheChangedChunksAreCopied) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  // Change only tensor b: every chunk without b's bytes is unchanged.
  f.model.b[3] += 1.0f;
  const Version v2 = f.Publish(/*delta_file=*/false);
  auto r = ApplyFromStore(f.root, "policy", v2, *live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->delta);
  EXPECT_NE(r->note.find("no delta file"), std::string::npos) << r->note;
  EXPECT_GE(r->chunks_copied, 1u);
  EXPECT_LE(r->chunks_copied, 2u);
  EXPECT_GT(r->chunks_unchanged, 5u);
  EXPECT_TRUE(live.Equals(f.model));
}

TEST(LiveSet, ADamagedBaseIsCaughtAndTheChunkCopiedWhole) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  Step(f.model, 1);
  const Version v2 = f.Publish();
  live.m.a[1000] ^= 0x40;  // a memory error, or a caller writing into the weights
  auto r = ApplyFromStore(f.root, "policy", v2, *live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_repaired, 1u);
  EXPECT_NE(r->note.find("does not match"), std::string::npos) << r->note;
  EXPECT_TRUE(live.Equals(f.model));
}

TEST(LiveSet, ACorruptedPayloadIsRefusedBeforeDecodingAndTheChunkCopiedWhole) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  Step(f.model, 1);
  const Version v2 = f.Publish();
  // Flip one bit in the last payload byte of the delta file.
  const fs::path path = DeltaFilePath(f.root, "policy", v2);
  {
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(-1, std::ios::end);
    char c = 0;
    io.get(c);
    io.seekp(-1, std::ios::end);
    io.put(static_cast<char>(c ^ 1));
  }
  auto r = ApplyFromStore(f.root, "policy", v2, *live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_repaired, 1u);
  EXPECT_NE(r->note.find("payload hash"), std::string::npos) << r->note;
  EXPECT_TRUE(live.Equals(f.model));
}

TEST(LiveSet, AShapeMismatchIsAnErrorAndLeavesTheLiveWeightsUntouched) {
  Fixture f;
  const Version v1 = f.Publish();
  std::vector<uint16_t> wrong(256 * 512);
  std::vector<LiveTensor> t = {{"a",
                                DType::kBF16,
                                {512, 256},
                                {reinterpret_cast<uint8_t*>(wrong.data()), wrong.size() * 2}}};
  auto set = LiveSet::Create(std::move(t));
  ASSERT_TRUE(set.ok());
  auto r = ApplyFromStore(f.root, "policy", v1, **set);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("BF16 [512, 256]"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("BF16 [256, 512]"), std::string::npos)
      << r.status().message();
  for (uint16_t x : wrong) ASSERT_EQ(x, 0);
  EXPECT_EQ((*set)->version(), Version(0));
}

TEST(LiveSet, ASubsetOfTensorsIsServedAndTheRestIgnored) {
  Fixture f;
  const Version v1 = f.Publish();
  std::vector<float> b(1000);
  auto set = OnlyB(b);
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, **set).ok());
  EXPECT_EQ(b, f.model.b);
  f.model.b[999] = -1.0f;
  Step(f.model, 4);
  const Version v2 = f.Publish();
  auto r = ApplyFromStore(f.root, "policy", v2, **set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(b, f.model.b);
}

TEST(LiveSet, ASecondCopyCatchesUpByACopyAndTakesOneDelta) {
  Fixture f;
  const Version v1 = f.Publish();
  Live front, back;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *front.set).ok());
  Step(f.model, 1);
  const Version v2 = f.Publish();
  ASSERT_TRUE(back.set->CopyFrom(*front.set).ok());
  EXPECT_EQ(back.set->version(), v1);
  back.m.c[17] ^= 0x8;  // damaged after the copy: the next apply checks every chunk
  auto r = ApplyFromStore(f.root, "policy", v2, *back.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->delta) << r->note;
  EXPECT_EQ(r->chunks_repaired, 1u);
  EXPECT_TRUE(back.Equals(f.model));

  std::vector<float> other(1000);
  auto small = LiveSet::Create(
      {{"b", DType::kF32, {1000}, {reinterpret_cast<uint8_t*>(other.data()), other.size() * 4}}});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->CopyFrom(*front.set).code(), Code::kFailedPrecondition);
}

// A flip's two copies as an update leaves them: `front` holds v2, `back` v1, and v3, a delta
// onto v2, is published.
struct ThreeVersions {
  Version v1, v2, v3;
};
ThreeVersions FrontAtV2BackAtV1(Fixture& f, Live& front, Live& back) {
  ThreeVersions v;
  v.v1 = f.Publish();
  EXPECT_TRUE(ApplyFromStore(f.root, "policy", v.v1, *front.set).ok());
  EXPECT_TRUE(ApplyFromStore(f.root, "policy", v.v1, *back.set).ok());
  Step(f.model, 1);
  v.v2 = f.Publish();
  EXPECT_TRUE(ApplyFromStore(f.root, "policy", v.v2, *front.set).ok());
  Step(f.model, 2);
  v.v3 = f.Publish();
  return v;
}

TEST(LiveSet, ASecondCopyCatchesUpChunkByChunkAsItIsPatched) {
  Fixture f;
  Live front, back;
  const auto [v1, v2, v3] = FrontAtV2BackAtV1(f, front, back);
  const Model front_before = front.m;
  back.m.c[17] ^= 0x8;  // bytes the catch-up overwrites: they do not matter
  auto r = ApplyFromStore(f.root, "policy", v3, *back.set, front.set.get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->caught_up);
  EXPECT_TRUE(r->delta) << r->note;
  EXPECT_EQ(r->from, v1);
  EXPECT_EQ(r->chunks_repaired, 0u);
  EXPECT_EQ(r->chunks_copied, 0u);
  EXPECT_TRUE(back.Equals(f.model));
  EXPECT_EQ(back.set->version(), v3);
  EXPECT_TRUE(front.Equals(front_before)) << "the catch-up source is only read";
  EXPECT_EQ(front.set->version(), v2);

  // A source damaged since its apply: the patched chunk fails its check and is copied whole.
  Step(f.model, 3);
  const Version v4 = f.Publish();
  Live third;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v3, *third.set).ok());
  back.m.a[9] ^= 0x1;
  r = ApplyFromStore(f.root, "policy", v4, *third.set, back.set.get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->caught_up);
  EXPECT_EQ(r->chunks_repaired, 1u) << r->note;
  EXPECT_TRUE(third.Equals(f.model));
}

TEST(LiveSet, ACatchUpSourceNotHoldingTheBaseIsNotRead) {
  Fixture f;
  Live live, stale;
  const auto [v1, v2, v3] = FrontAtV2BackAtV1(f, live, stale);
  // The source holds v1, v3's base is v2: the set applies from what it holds (v2).
  stale.m.a[0] ^= 0x40;
  auto r = ApplyFromStore(f.root, "policy", v3, *live.set, stale.set.get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->caught_up);
  EXPECT_TRUE(r->delta) << r->note;
  EXPECT_TRUE(live.Equals(f.model));

  // Other tensors: refused before anything is written.
  std::vector<float> other(1000);
  auto small = LiveSet::Create(
      {{"b", DType::kF32, {1000}, {reinterpret_cast<uint8_t*>(other.data()), other.size() * 4}}});
  ASSERT_TRUE(small.ok());
  Live fresh;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v2, *fresh.set).ok());
  auto view = OpenedVersion::Open(f.root, "policy", v3);
  ASSERT_TRUE(view.ok());
  auto refused = fresh.set->Apply((*view)->view(), ApplyOptions{.catch_up_from = small->get()});
  EXPECT_EQ(refused.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(fresh.set->version(), v2);
}

TEST(LiveSet, RegistrationChecksSizes) {
  std::vector<uint8_t> bytes(10);
  EXPECT_EQ(LiveSet::Create({{"x", DType::kBF16, {4}, bytes}}).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(LiveSet::Create({{"x", DType::kU8, {10}, bytes}, {"x", DType::kU8, {10}, bytes}})
                .status()
                .code(),
            Code::kInvalidArgument);
}

// The attestation digest of `set` against committed `v`, and the version's own.
std::pair<Result<Digest>, Digest> AttestAgainst(const fs::path& root, Version v,
                                                const LiveSet& set) {
  auto opened = OpenedVersion::Open(root, "policy", v);
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return {set.Attest((*opened)->view()), ExpectedAttestation((*opened)->manifest())};
}

TEST(LiveSetAttest, LiveTensorsHoldingTheVersionAttestItsDigest) {
  for (HashAlgorithm algorithm : {HashAlgorithm::kXxh3_128, HashAlgorithm::kSha256}) {
    SCOPED_TRACE(std::string(HashAlgorithmName(algorithm)));
    Fixture f;
    f.algorithm = algorithm;
    const Version v1 = f.Publish();
    Live live;
    ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
    Step(f.model, 11);
    const Version v2 = f.Publish();
    auto r = ApplyFromStore(f.root, "policy", v2, *live.set);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->delta);
    auto [got, want] = AttestAgainst(f.root, v2, *live.set);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_EQ(*got, want);
  }
}

TEST(LiveSetAttest, AnApplyThatHashedEveryChunkCarriesTheAttestation) {
  Fixture f;
  Live front, back;
  const auto [v1, v2, v3] = FrontAtV2BackAtV1(f, front, back);
  // A first apply copies and hashes every chunk; so does a flip's catch-up.
  Live fresh;
  auto first = ApplyFromStore(f.root, "policy", v3, *fresh.set);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(first->attestation.has_value());
  EXPECT_TRUE(first->attestation->matches);
  EXPECT_TRUE(first->attestation->every_tensor);
  auto [got1, want1] = AttestAgainst(f.root, v3, *fresh.set);
  ASSERT_TRUE(got1.ok());
  EXPECT_EQ(first->attestation->digest, *got1);
  back.m.a[3] ^= 0x2;  // overwritten by the catch-up
  auto r = ApplyFromStore(f.root, "policy", v3, *back.set, front.set.get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->caught_up);
  ASSERT_TRUE(r->attestation.has_value());
  auto [got3, want3] = AttestAgainst(f.root, v3, *back.set);
  ASSERT_TRUE(got3.ok());
  EXPECT_EQ(r->attestation->digest, *got3);
  EXPECT_EQ(r->attestation->digest, want3);
  EXPECT_TRUE(r->attestation->matches);

  // In place, a delta leaves unchanged chunks unhashed: no attestation from the apply.
  f.model.a[0] += 1;  // one chunk changes
  const Version v4 = f.Publish();
  auto in_place = ApplyFromStore(f.root, "policy", v4, *back.set);  // back holds v3
  ASSERT_TRUE(in_place.ok());
  ASSERT_TRUE(in_place->delta);
  ASSERT_GT(in_place->chunks_unchanged, 0u);
  EXPECT_FALSE(in_place->attestation.has_value());

  // A subset's attestation covers the file bytes elsewhere, as Attest's does.
  std::vector<float> b(1000);
  auto subset = OnlyB(b);
  ASSERT_TRUE(subset.ok());
  auto sub = ApplyFromStore(f.root, "policy", v4, **subset);
  ASSERT_TRUE(sub.ok());
  ASSERT_TRUE(sub->attestation.has_value());
  EXPECT_FALSE(sub->attestation->every_tensor);
  auto [got4, want4] = AttestAgainst(f.root, v4, **subset);
  ASSERT_TRUE(got4.ok());
  EXPECT_EQ(sub->attestation->digest, *got4);
  EXPECT_EQ(sub->attestation->digest, want4);
}

TEST(LiveSetAttest, OneByteChangedAfterTheApplyIsAMismatch) {
  Fixture f;
  const Version v1 = f.Publish();
  Live live;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  live.m.c[12345] ^= 0x0100;  // an engine writing into its weights, a flipped bit
  auto [got, want] = AttestAgainst(f.root, v1, *live.set);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_NE(*got, want);
  live.m.c[12345] ^= 0x0100;
  auto [again, same] = AttestAgainst(f.root, v1, *live.set);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, same);
}

TEST(LiveSetAttest, ASubsetAttestsTheWholeVersionWithFileBytesElsewhere) {
  Fixture f;
  const Version v1 = f.Publish();
  std::vector<float> b(1000);
  auto set = OnlyB(b);
  ASSERT_TRUE(set.ok());
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, **set).ok());
  auto [got, want] = AttestAgainst(f.root, v1, **set);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, want);
  b[0] += 1.0f;
  auto [changed, _] = AttestAgainst(f.root, v1, **set);
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(*changed, want);
}

TEST(LiveSetAttest, AVersionTheTensorsDoNotHoldIsRefused) {
  Fixture f;
  const Version v1 = f.Publish();
  Step(f.model, 3);
  const Version v2 = f.Publish();
  Live live;
  auto [none, _] = AttestAgainst(f.root, v1, *live.set);
  EXPECT_EQ(none.status().code(), Code::kFailedPrecondition);
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *live.set).ok());
  auto [other, __] = AttestAgainst(f.root, v2, *live.set);
  EXPECT_EQ(other.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("v1"), std::string::npos) << other.status().ToString();
}

}  // namespace
}  // namespace weightcast::live
