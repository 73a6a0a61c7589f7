// Device checks (docs/manifest_format.md): one wsum-128 per chunk, serialized as 16 bytes each,
// refused when the count, a length or a tail is wrong, outside the root and inside the signature.
#include <gtest/gtest.h>

#include "manifest/builder.h"
#include "manifest/manifest.pb.h"
#include "manifest_test_util.h"
#include "trust/signed_manifest.h"

namespace weightcast {
namespace {

using testing::MakeSmallCheckpoint;
using testing::TempDir;

class DeviceChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt_ = MakeSmallCheckpoint(dir_.path());
    Result<Manifest> m = BuildManifest(ckpt_, "policy", Version(7), {.chunk_size = kMinChunkSize});
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    manifest_ = *m;
    ASSERT_GT(manifest_.chunk_count(), 1u);
    Result<std::vector<Digest>> checks = HashChunks(
        ckpt_.root, manifest_.files, manifest_.chunk_size, HashAlgorithm::kWeightedSum128, 1);
    ASSERT_TRUE(checks.ok());
    manifest_.device_checks = *checks;
  }

  TempDir dir_;
  Checkpoint ckpt_;
  Manifest manifest_;
};

TEST_F(DeviceChecks, RoundTripOutsideTheRoot) {
  ASSERT_TRUE(ValidateManifest(manifest_).ok());
  Result<Manifest> back = ParseManifest(AsBytes(SerializeManifest(manifest_)));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->device_checks, manifest_.device_checks);
  Manifest without = manifest_;
  without.device_checks.clear();
  EXPECT_EQ(ComputeRoot(without), ComputeRoot(manifest_));
}

TEST_F(DeviceChecks, AreRefusedWithTheWrongCountLengthOrTail) {
  Manifest m = manifest_;
  m.device_checks.pop_back();
  EXPECT_NE(ValidateManifest(m).message().find("device checks for"), std::string::npos);
  m = manifest_;
  m.device_checks[0][20] = 1;
  EXPECT_NE(ValidateManifest(m).message().find("last 16 bytes"), std::string::npos);
  manifest::Manifest p;
  ASSERT_TRUE(p.ParseFromString(SerializeManifest(manifest_)));
  p.set_device_checks(0, std::string(15, 'x'));
  const Status s = ParseManifest(AsBytes(p.SerializeAsString())).status();
  EXPECT_EQ(s.code(), Code::kCorrupt);
  EXPECT_NE(s.message().find("wsum-128"), std::string::npos) << s.ToString();
}

TEST_F(DeviceChecks, TheSignatureCoversThem) {
  const std::string secret = "device checks test secret";
  std::vector<uint8_t> signed_bytes = SignManifestWithSecret(manifest_, secret);
  ASSERT_TRUE(VerifySignedManifestWithSecret(signed_bytes, secret).ok());
  const std::string needle(reinterpret_cast<const char*>(manifest_.device_checks[1].data()), 16);
  const std::string body(signed_bytes.begin() + kSignedManifestHeaderSize, signed_bytes.end());
  const size_t at = body.find(needle);
  ASSERT_NE(at, std::string::npos);
  signed_bytes[kSignedManifestHeaderSize + at] ^= 1;
  EXPECT_EQ(VerifySignedManifestWithSecret(signed_bytes, secret).status().code(),
            Code::kUnauthenticated);
}

}  // namespace
}  // namespace weightcast
