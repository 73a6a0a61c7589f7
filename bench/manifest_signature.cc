// What signing a version costs its publisher and checking it costs each node, at RL sizes: the
// manifest of a bf16 model of 100M and 500M parameters (one tensor per 1M parameters, the
// default chunk size, fast hashes and a delta table, as an RL step publishes it), signed with
// a publisher's certificate (Ed25519, certificate mode) and with the cluster secret
// (HMAC-SHA256, development mode). Verifying in certificate mode includes the certificate chain
// and the revocation list. Certificate mode also signs the version's commit decision (the
// coordinator, once) and checks it (each agent, once): timed too, and in the total.
//
//   bench_manifest_signature [--rounds 50]
//
// Last line: one JSON object; times are milliseconds per manifest, the median of the rounds;
// added_ms is the median, over rounds, of (certificate sign + verify + decision sign + decision
// verify) - (HMAC sign + verify).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "manifest/builder.h"
#include "manifest/chunk_size.h"
#include "trust/authority.h"
#include "trust/decision_statement.h"
#include "trust/signed_manifest.h"

using namespace weightcast;

namespace {

using Clock = std::chrono::steady_clock;

Digest RandomDigest(std::mt19937_64& rng, size_t bytes = 32) {
  Digest d{};
  for (size_t i = 0; i < bytes; ++i) d[i] = static_cast<uint8_t>(rng());
  return d;
}

Manifest RlStepManifest(uint64_t params) {
  std::mt19937_64 rng(params);
  Manifest m;
  m.channel = "policy";
  m.version = Version(2);
  const uint64_t total = params * 2;  // bf16
  m.chunk_size = ResolveChunkSize(kAutoChunkSize, total, nullptr);
  m.files.push_back({"model.safetensors", total, 0});
  const uint64_t tensor_bytes = 2'000'000;
  for (uint64_t offset = 0, i = 0; offset < total; offset += tensor_bytes, ++i) {
    const uint64_t size = std::min(tensor_bytes, total - offset);
    m.tensors.push_back(
        {"layers." + std::to_string(i) + ".weight", DType::kBF16, {size / 2}, 0, offset, size});
  }
  const uint64_t chunks = (total + m.chunk_size - 1) / m.chunk_size;
  DeltaInfo delta;
  delta.base_version = Version(1);
  delta.base_root = RandomDigest(rng);
  for (uint64_t i = 0; i < chunks; ++i) {
    m.chunk_hashes.push_back(RandomDigest(rng));
    m.fast_hashes.push_back(RandomDigest(rng, 16));
    delta.chunks.push_back({ChunkEncoding::kXor, m.chunk_size / 20, RandomDigest(rng)});
  }
  m.delta = std::move(delta);
  m.root = ComputeRoot(m);
  return m;
}

template <typename Fn>
double MedianMs(int rounds, Fn&& fn) {
  std::vector<double> ms;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Fail(const Status& status) {
  std::fprintf(stderr, "bench_manifest_signature: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  Result<trust::Authority> ca = trust::Authority::Create("bench CA");
  if (!ca.ok()) return Fail(ca.status());
  Result<trust::IssuedCertificate> issued =
      ca->Issue({"trainer", *trust::ParseRolesFlag("publisher:policy")});
  if (!issued.ok()) return Fail(issued.status());
  // A revocation list with entries, as a fleet that has revoked a few machines has.
  for (int i = 0; i < 16; ++i) {
    Result<trust::IssuedCertificate> lost = ca->Issue({"lost", *trust::ParseRolesFlag("agent")});
    if (!lost.ok() || !ca->Revoke(lost->certificate_pem).ok()) return Fail(lost.status());
  }
  Result<trust::IssuedCertificate> coordinator_cert =
      ca->Issue({"coordinator", *trust::ParseRolesFlag("coordinator")});
  if (!coordinator_cert.ok()) return Fail(coordinator_cert.status());
  auto coordinator =
      trust::SigningIdentity::FromPem(coordinator_cert->certificate_pem, coordinator_cert->key_pem);
  if (!coordinator.ok()) return Fail(coordinator.status());
  auto identity = trust::SigningIdentity::FromPem(issued->certificate_pem, issued->key_pem);
  auto anchor = trust::TrustAnchor::FromPem(ca->certificate_pem(), *ca->crl_pem());
  if (!identity.ok()) return Fail(identity.status());
  if (!anchor.ok()) return Fail(anchor.status());
  const std::string secret = "bench secret of enough length";

  std::string json = "{\"bench\":\"manifest_signature\",\"rounds\":" + std::to_string(rounds);
  for (uint64_t params : {100'000'000ull, 500'000'000ull}) {
    const Manifest m = RlStepManifest(params);
    if (Status valid = ValidateManifest(m); !valid.ok()) return Fail(valid);
    const ManifestSigner certified{secret, identity->get()};
    const ManifestTrust certified_trust{secret, anchor->get()};
    std::vector<uint8_t> signed_bytes = *SignManifest(m, certified);
    std::vector<uint8_t> hmac_bytes = SignManifestWithSecret(m, secret);
    if (!VerifySignedManifest(signed_bytes, certified_trust).ok()) return Fail(Internal("verify"));
    // Interleaved, round by round, so that the machine's drift hits both modes alike; the
    // added cost is the median of the rounds' differences.
    std::vector<double> sign_ms, verify_ms, hmac_sign_ms, hmac_verify_ms, added_ms;
    std::vector<double> decision_sign_ms, decision_verify_ms;
    trust::DecisionStatement commit;
    commit.channel = m.channel;
    commit.version = m.version.value();
    commit.root = m.root;
    commit.commit = true;
    commit.sequence = 7;
    std::vector<uint8_t> decision;
    auto time_ms = [](auto&& fn) {
      const auto start = Clock::now();
      fn();
      return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    };
    for (int i = 0; i < rounds; ++i) {
      sign_ms.push_back(time_ms([&] { signed_bytes = *SignManifest(m, certified); }));
      verify_ms.push_back(time_ms([&] {
        if (!VerifySignedManifest(signed_bytes, certified_trust).ok()) std::abort();
      }));
      hmac_sign_ms.push_back(time_ms([&] { hmac_bytes = SignManifestWithSecret(m, secret); }));
      hmac_verify_ms.push_back(time_ms([&] {
        if (!VerifySignedManifestWithSecret(hmac_bytes, secret).ok()) std::abort();
      }));
      decision_sign_ms.push_back(
          time_ms([&] { decision = *trust::SignDecision(commit, **coordinator); }));
      decision_verify_ms.push_back(time_ms([&] {
        if (!trust::DecisionAuthorized(decision, **anchor, m.channel, m.version.value(), true,
                                       &m.root, 0)
                 .ok()) {
          std::abort();
        }
      }));
      added_ms.push_back(sign_ms.back() + verify_ms.back() + decision_sign_ms.back() +
                         decision_verify_ms.back() - hmac_sign_ms.back() - hmac_verify_ms.back());
    }
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double sign = median(sign_ms);
    const double verify = median(verify_ms);
    const double hmac_sign = median(hmac_sign_ms);
    const double hmac_verify = median(hmac_verify_ms);
    const double added = median(added_ms);
    const double decision_sign = median(decision_sign_ms);
    const double decision_verify = median(decision_verify_ms);
    // Parsing and validating the manifest is part of both verifications; shown on its own.
    const std::string serialized = SerializeManifest(m);
    const double parse = MedianMs(rounds, [&] {
      if (!ParseManifest(AsBytes(serialized)).ok()) std::abort();
    });
    const std::string tag = std::to_string(params / 1'000'000) + "M";
    std::printf(
        "%s params: manifest %zu bytes, %u chunks; certificate: sign %.3f ms, verify %.3f "
        "ms; decision: sign %.3f ms, verify %.3f ms; cluster secret: sign %.3f ms, verify %.3f "
        "ms; parse alone %.3f ms\n",
        tag.c_str(), serialized.size(), m.chunk_count(), sign, verify, decision_sign,
        decision_verify, hmac_sign, hmac_verify, parse);
    char part[512];
    std::snprintf(part, sizeof(part),
                  ",\"%s\":{\"manifest_bytes\":%zu,\"chunks\":%u,\"cert_sign_ms\":%.3f,"
                  "\"cert_verify_ms\":%.3f,\"decision_sign_ms\":%.3f,\"decision_verify_ms\":%.3f,"
                  "\"secret_sign_ms\":%.3f,\"secret_verify_ms\":%.3f,"
                  "\"parse_ms\":%.3f,\"added_ms\":%.3f}",
                  tag.c_str(), serialized.size(), m.chunk_count(), sign, verify, decision_sign,
                  decision_verify, hmac_sign, hmac_verify, parse, added);
    json += part;
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
