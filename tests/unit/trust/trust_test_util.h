// A cluster CA and certificates made in memory for trust tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>

#include "trust/authority.h"
#include "trust/signing_identity.h"
#include "trust/trust_anchor.h"

namespace weightcast::testing {

inline trust::Authority NewAuthority(const std::string& name = "test cluster CA") {
  Result<trust::Authority> ca = trust::Authority::Create(name);
  EXPECT_TRUE(ca.ok()) << ca.status().ToString();
  return std::move(ca).value();
}

inline std::shared_ptr<const trust::TrustAnchor> AnchorOf(const trust::Authority& ca) {
  Result<std::string> crl = ca.crl_pem();
  EXPECT_TRUE(crl.ok()) << crl.status().ToString();
  auto anchor = trust::TrustAnchor::FromPem(ca.certificate_pem(), *crl);
  EXPECT_TRUE(anchor.ok()) << anchor.status().ToString();
  return anchor.ok() ? *anchor : nullptr;
}

// A certificate issued by `ca` with `roles` (roles.h's flag syntax), and its key.
inline std::shared_ptr<const trust::SigningIdentity> Issue(
    const trust::Authority& ca, const std::string& name, const std::string& roles,
    int64_t start = 0, int64_t valid = trust::kDay, std::optional<uint64_t> node_id = {}) {
  Result<trust::Roles> parsed = trust::ParseRolesFlag(roles);
  EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
  Result<trust::IssuedCertificate> issued = ca.Issue({.name = name,
                                                      .roles = *parsed,
                                                      .node_id = node_id,
                                                      .valid_seconds = valid,
                                                      .start_offset_seconds = start});
  EXPECT_TRUE(issued.ok()) << issued.status().ToString();
  auto identity = trust::SigningIdentity::FromPem(issued->certificate_pem, issued->key_pem);
  EXPECT_TRUE(identity.ok()) << identity.status().ToString();
  return identity.ok() ? *identity : nullptr;
}

}  // namespace weightcast::testing
