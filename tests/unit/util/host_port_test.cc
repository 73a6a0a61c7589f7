#include "util/host_port.h"

#include <gtest/gtest.h>

namespace weightcast {
namespace {

TEST(HostPort, ParsesNamesIpv4AndBracketedIpv6) {
  auto name = ParseHostPort("coordinator.internal:7400");
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_EQ(name->host, "coordinator.internal");
  EXPECT_EQ(name->port, 7400);
  EXPECT_FALSE(name->bracketed);

  auto v4 = ParseHostPort("198.18.0.1:0");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "198.18.0.1");
  EXPECT_EQ(v4->port, 0);
  EXPECT_EQ(v4->ToString(), "198.18.0.1:0");

  auto v6 = ParseHostPort("[::1]:65535");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 65535);
  EXPECT_TRUE(v6->bracketed);
  EXPECT_EQ(v6->ToString(), "[::1]:65535");
}

TEST(HostPort, APortMayBeOptional) {
  auto bare = ParseHostPort("hooks.local", PortRule::kOptional);
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->host, "hooks.local");
  EXPECT_FALSE(bare->port.has_value());
  EXPECT_EQ(bare->ToString(), "hooks.local");
  auto v6 = ParseHostPort("[fe80::1]", PortRule::kOptional);
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "fe80::1");
  EXPECT_FALSE(v6->port.has_value());
  EXPECT_FALSE(ParseHostPort("hooks.local").ok());  // required by default
}

TEST(HostPort, RefusesWhatIsNotHostColonPortAndSaysWhy) {
  struct Case {
    const char* text;
    const char* why;
  };
  const Case cases[] = {
      {"", "no host"},
      {":80", "no host"},
      {"host", "no port"},
      {"host:", "the port must be a number"},
      {"host:65536", "the port must be a number"},
      {"host:-1", "the port must be a number"},
      {"host:+80", "the port must be a number"},
      {"host:80x", "the port must be a number"},
      {"host: 80", "the port must be a number"},
      {"::1:80", "needs brackets"},
      {"[::1", "no closing ']'"},
      {"[::1]80", "only ':port' may follow ']'"},
      {"[]:80", "no host"},
      {"[1.2.3.4]:80", "brackets hold an IPv6 address"},
  };
  for (const Case& c : cases) {
    auto r = ParseHostPort(c.text);
    ASSERT_FALSE(r.ok()) << "'" << c.text << "' parsed";
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << c.text;
    EXPECT_NE(r.status().message().find(c.why), std::string::npos)
        << "'" << c.text << "': " << r.status().message();
  }
}

TEST(HostPort, QuotesControlBytesEscaped) {
  auto r = ParseHostPort("evil\n\x1b[2Jhost");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  EXPECT_EQ(r.status().message().find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace weightcast
