#include "metrics/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "metrics/registry.h"

namespace weightcast::metrics {
namespace {

// One HTTP/1.0 request over a raw loopback socket; returns the whole response. Raw on purpose:
// the test checks what goes over the wire, not what a client library makes of it.
std::string RawRequest(const std::string& address, const std::string& request) {
  auto colon = address.rfind(':');
  int port = std::stoi(address.substr(colon + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return "connect failed";
  }
  EXPECT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

std::string Get(const std::string& address, const std::string& path) {
  return RawRequest(address, "GET " + path + " HTTP/1.0\r\nHost: test\r\n\r\n");
}

TEST(MetricsServer, ServesMetricsAndHealthOnLoopback) {
  Registry registry;
  Counter& c = registry.Counter("wc_test_total", "A test counter", {{"channel", "p"}});
  c.Add(41);
  auto server = MetricsServer::Start(registry, "127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string address = (*server)->address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(address, "127.0.0.1:0");

  c.Add();  // the page is rendered per request, not at Start
  std::string response = Get(address, "/metrics");
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(response.find("\r\n\r\n" + registry.Render()), std::string::npos) << response;
  EXPECT_NE(response.find("wc_test_total{channel=\"p\"} 42\n"), std::string::npos);

  response = Get(address, "/healthz");
  EXPECT_EQ(response.rfind("HTTP/1.1 200", 0), 0u) << response;
  EXPECT_NE(response.find("\r\n\r\nok\n"), std::string::npos);

  EXPECT_EQ(Get(address, "/").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Get(address, "/metrics/x").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(RawRequest(address, "POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
                .rfind("HTTP/1.1 405", 0),
            0u);

  (*server)->Stop();
  (*server)->Stop();  // idempotent
  EXPECT_EQ(Get(address, "/metrics"), "connect failed");
}

TEST(MetricsServer, StopRightAfterStartReturns) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    auto server = MetricsServer::Start(registry, "127.0.0.1:0");
    ASSERT_TRUE(server.ok()) << server.status().ToString();
  }  // each destructor stops its server; a lost stop would hang here
}

TEST(MetricsServer, ReportsAnAddressInUse) {
  Registry registry;
  auto first = MetricsServer::Start(registry, "127.0.0.1:0");
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start(registry, (*first)->address());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kUnavailable);
  EXPECT_NE(second.status().message().find((*first)->address()), std::string::npos);
}

TEST(MetricsServer, RejectsMalformedAddresses) {
  Registry registry;
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:70000", "127.0.0.1:x",
                          "localhost:80", "[::1]", "[::1:80", "[127.0.0.1]:80", ":80"}) {
    auto server = MetricsServer::Start(registry, bad);
    ASSERT_FALSE(server.ok()) << bad;
    EXPECT_EQ(server.status().code(), Code::kInvalidArgument) << bad;
  }
}

TEST(ParseListenAddress, AcceptsIpv4AndBracketedIpv6) {
  auto v4 = ParseListenAddress("0.0.0.0:9100");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->host, "0.0.0.0");
  EXPECT_EQ(v4->port, 9100);
  auto v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
}

}  // namespace
}  // namespace weightcast::metrics
