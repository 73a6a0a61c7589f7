// Signed statements and certificates from outside bytes (a manifest, an operator's rollback
// order, a coordinator's decision): the envelope split, the DER certificate parser, the role and
// node URIs in it and the decision's text must never crash, over-read or allocate without bound,
// and nothing the fuzzer makes may verify (it holds no key of the CA nor the secret). Seeds
// (fuzz/seeds/signed_manifest/) hold a certified envelope and a bare DER certificate, so the
// certificate and role parsers are reached.
#include <cstdint>
#include <cstdlib>
#include <memory>

#include "trust/authority.h"
#include "trust/certificate.h"
#include "trust/decision_statement.h"
#include "trust/rollback_order.h"
#include "trust/signed_manifest.h"

namespace {

const weightcast::trust::TrustAnchor& Anchor() {
  using namespace weightcast;
  static const std::shared_ptr<const trust::TrustAnchor> anchor = [] {
    Result<trust::Authority> ca = trust::Authority::Create("fuzz CA");
    if (!ca.ok()) std::abort();
    auto made = trust::TrustAnchor::FromPem(ca->certificate_pem(), *ca->crl_pem());
    if (!made.ok()) std::abort();
    return *made;
  }();
  return *anchor;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace weightcast;
  const std::span<const uint8_t> bytes(data, size);
  (void)trust::ReadCertificate(bytes);
  (void)ManifestSignerOf(bytes);
  if (VerifySignedManifest(bytes, {"fuzz secret of enough length", &Anchor()}).ok()) std::abort();
  if (VerifySignedManifestWithSecret(bytes, "fuzz secret of enough length").ok()) std::abort();
  if (Anchor().Check(bytes).ok()) std::abort();
  if (trust::VerifyRollbackOrder(bytes, Anchor()).ok()) std::abort();
  if (trust::VerifyDecision(bytes, Anchor()).ok()) std::abort();
  // The text of a decision is read only after its signature holds: reached here directly.
  (void)trust::ParseDecisionBody(bytes);
  return 0;
}
