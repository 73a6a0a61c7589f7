// Roles as the CA writes them into certificates and as `weightcast ca issue --role` spells them.
#include <gtest/gtest.h>

#include "trust/roles.h"

namespace weightcast::trust {
namespace {

TEST(Roles, FlagRoundTripsThroughCertificateUris) {
  Result<Roles> roles = ParseRolesFlag("publisher:policy,agent,publisher:policy,operator");
  ASSERT_TRUE(roles.ok()) << roles.status().ToString();
  EXPECT_TRUE(roles->agent);
  EXPECT_TRUE(roles->operator_role);
  EXPECT_FALSE(roles->coordinator);
  EXPECT_EQ(roles->publisher_channels, std::vector<std::string>{"policy"});
  EXPECT_EQ(roles->ToString(), "agent, publisher:policy, operator");
  Result<Roles> back = ParseRoleUris(RoleUris(*roles));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, *roles);
}

TEST(Roles, PublishingIsPerChannelUnlessStar) {
  Roles one = *ParseRolesFlag("publisher:a");
  EXPECT_TRUE(one.MayPublish("a"));
  EXPECT_FALSE(one.MayPublish("b"));
  EXPECT_FALSE(ParseRolesFlag("agent")->MayPublish("a"));
  EXPECT_TRUE(ParseRolesFlag("publisher:*")->MayPublish("anything"));
}

TEST(Roles, BadRolesAreRefusedWithTheirName) {
  for (const char* bad : {"", "admin", "agent,,operator", "publisher:", "publisher:../x",
                          "publisher:a b", ",agent"}) {
    Result<Roles> roles = ParseRolesFlag(bad);
    EXPECT_EQ(roles.status().code(), Code::kInvalidArgument) << "'" << bad << "'";
  }
  EXPECT_NE(ParseRolesFlag("admin").status().message().find("unknown role 'admin'"),
            std::string::npos);
}

TEST(Roles, CertificateUrisOutsideWeightcastAreIgnoredUnknownOnesInsideRefused) {
  Result<Roles> roles =
      ParseRoleUris({"https://example.com/node", "urn:weightcast:role:agent", "urn:other:x"});
  ASSERT_TRUE(roles.ok());
  EXPECT_TRUE(roles->agent);
  EXPECT_FALSE(ParseRoleUris({"urn:weightcast:role:superuser"}).ok());
  EXPECT_FALSE(ParseRoleUris({"urn:weightcast:future:thing"}).ok());
}

}  // namespace
}  // namespace weightcast::trust
