// Live tensors behind a DeviceMemory (live/device_memory.h): every byte reaches them through the
// device's calls, payloads arrive as changes the device applies, and chunks are checked where
// they lie against the version's device checks. The device here is this process's memory with
// its calls counted; a GPU's implementation runs the same calls (python/weightcast/_device.py).
#include "live/device_memory.h"

#include <gtest/gtest.h>

#include <cstring>

#include "hash/digest.h"
#include "live_test_util.h"
#include "manifest/attestation.h"

namespace weightcast::live {
namespace {

using namespace ::weightcast::live::testing;  // NOLINT(google-build-using-namespace)

class CountingDevice final : public DeviceMemory {
 public:
  Status Write(uint64_t address, std::span<const uint8_t> from) override {
    ++writes;
    std::memcpy(At(address), from.data(), from.size());
    return Status::Ok();
  }
  Status Read(uint64_t address, std::span<uint8_t> to) override {
    ++reads;
    std::memcpy(to.data(), At(address), to.size());
    return Status::Ok();
  }
  Status Copy(uint64_t to, uint64_t from, uint64_t size) override {
    ++copies;
    std::memcpy(At(to), At(from), size);
    return Status::Ok();
  }
  Status Change(uint64_t address, uint8_t width, bool add, std::span<const uint64_t> offsets,
                std::span<const uint8_t> values) override {
    ++changes;
    elements += offsets.size();
    for (size_t e = 0; e < offsets.size(); ++e) {
      uint8_t* p = At(address) + offsets[e];
      const uint8_t* v = values.data() + e * width;
      unsigned carry = 0;
      for (uint8_t k = 0; k < width; ++k) {
        if (!add) {
          p[k] ^= v[k];
          continue;
        }
        const unsigned sum = p[k] + v[k] + carry;
        p[k] = static_cast<uint8_t>(sum);
        carry = sum >> 8;
      }
    }
    return Status::Ok();
  }
  Status XorBytes(uint64_t address, std::span<const uint8_t> bytes) override {
    ++xors;
    for (size_t i = 0; i < bytes.size(); ++i) At(address)[i] ^= bytes[i];
    return Status::Ok();
  }
  Result<Sums> WeightedSums(uint64_t address, uint64_t size) override {
    ++sums;
    if (fail_sums) return Unavailable("the device is gone");
    const weightcast::WeightedSums s = WeightedSumsOf({At(address), size}, 0);
    return Sums{s.a, s.b};
  }

  int writes = 0, reads = 0, copies = 0, changes = 0, xors = 0, sums = 0;
  uint64_t elements = 0;
  bool fail_sums = false;

 private:
  static uint8_t* At(uint64_t address) { return reinterpret_cast<uint8_t*>(address); }
};

struct OnDevice {
  std::shared_ptr<CountingDevice> device = std::make_shared<CountingDevice>();
  Live live{DeviceTensorMemory(device)};
};

TEST(DeviceMemory, StepsArePatchedOnTheDeviceAndCheckedThereAgainstDeviceChecks) {
  Fixture f;
  f.device_checks = true;
  const Version v1 = f.Publish();
  OnDevice d;
  auto r = ApplyFromStore(f.root, "policy", v1, *d.live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(d.live.Equals(f.model));
  EXPECT_EQ(r->check, HashAlgorithm::kWeightedSum128);
  EXPECT_GT(d.device->writes, 0);
  EXPECT_EQ(d.device->reads, 0);  // checked where it lies, nothing read back
  for (uint32_t step = 1; step <= 3; ++step) {
    Step(f.model, step);
    const Version v = f.Publish();
    const int writes = d.device->writes;
    r = ApplyFromStore(f.root, "policy", v, *d.live.set);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(r->delta) << r->note;
    EXPECT_EQ(r->chunks_repaired, 0u) << r->note;
    EXPECT_TRUE(d.live.Equals(f.model)) << "step " << step;
    EXPECT_EQ(d.device->writes, writes);  // only changes, no chunk written whole
  }
  EXPECT_GT(d.device->changes, 0);
  EXPECT_GT(d.device->elements, 0u);
  EXPECT_EQ(d.device->reads, 0);
}

TEST(DeviceMemory, AVersionWithoutDeviceChecksIsReadBackAndHashed) {
  Fixture f;
  const Version v1 = f.Publish();
  OnDevice d;
  auto r = ApplyFromStore(f.root, "policy", v1, *d.live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->check, HashAlgorithm::kXxh3_128);
  EXPECT_GT(d.device->reads, 0);
  EXPECT_EQ(d.device->sums, 0);
  Step(f.model, 1);
  r = ApplyFromStore(f.root, "policy", f.Publish(), *d.live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->delta);
  EXPECT_TRUE(d.live.Equals(f.model));
}

TEST(DeviceMemory, ADamagedElementOnTheDeviceIsCaughtByItsCheckAndTheChunkCopiedWhole) {
  Fixture f;
  f.device_checks = true;
  const Version v1 = f.Publish();
  OnDevice d;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *d.live.set).ok());
  Step(f.model, 1);
  const Version v2 = f.Publish();
  d.live.m.c[777] ^= 0x0100;  // a memory error in device memory
  auto r = ApplyFromStore(f.root, "policy", v2, *d.live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks_repaired, 1u) << r->note;
  EXPECT_TRUE(d.live.Equals(f.model));
}

TEST(DeviceMemory, AFailingDeviceFailsTheApplyAndTheTensorsHoldNoVersion) {
  Fixture f;
  f.device_checks = true;
  const Version v1 = f.Publish();
  OnDevice d;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *d.live.set).ok());
  Step(f.model, 1);
  const Version v2 = f.Publish();
  d.device->fail_sums = true;
  auto r = ApplyFromStore(f.root, "policy", v2, *d.live.set);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the device is gone"), std::string::npos);
  EXPECT_EQ(d.live.set->version(), Version(0));
  d.device->fail_sums = false;  // the next apply copies every chunk and checks it
  r = ApplyFromStore(f.root, "policy", v2, *d.live.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(d.live.Equals(f.model));
}

TEST(DeviceMemory, TheFlipsOtherCopyCatchesUpOnTheDevice) {
  Fixture f;
  f.device_checks = true;
  const Version v1 = f.Publish();
  OnDevice front;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *front.live.set).ok());
  Live back{DeviceTensorMemory(front.device)};
  ASSERT_TRUE(back.set->CopyFrom(*front.live.set).ok());
  EXPECT_EQ(front.device->copies, 3);  // one per tensor, device to device
  EXPECT_TRUE(back.Equals(f.model));
  Step(f.model, 1);
  auto r = ApplyFromStore(f.root, "policy", f.Publish(), *back.set);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->delta);
  EXPECT_TRUE(back.Equals(f.model));
}

TEST(DeviceMemory, AttestationSumsTheTensorsOnTheDevice) {
  Fixture f;
  f.device_checks = true;
  const Version v1 = f.Publish();
  OnDevice d;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *d.live.set).ok());
  auto opened = OpenedVersion::Open(f.root, "policy", v1);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto digest = d.live.set->Attest((*opened)->view());
  ASSERT_TRUE(digest.ok()) << digest.status().ToString();
  EXPECT_EQ(*digest, ExpectedAttestation((*opened)->manifest()));
  EXPECT_EQ(d.device->reads, 0);
  // A host copy of the same bytes attests the same digest, summing on the host.
  Live host;
  ASSERT_TRUE(ApplyFromStore(f.root, "policy", v1, *host.set).ok());
  auto on_host = host.set->Attest((*opened)->view());
  ASSERT_TRUE(on_host.ok());
  EXPECT_EQ(*on_host, *digest);
}

}  // namespace
}  // namespace weightcast::live
