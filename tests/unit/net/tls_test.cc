#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

#include "net/handshake.h"
#include "net/tcp_transport.h"
#include "net_test_util.h"

namespace weightcast::net {
namespace {

using namespace std::chrono_literals;
using testing::LogCapture;
using testing::Pattern;
using testing::TestOptions;

// A self-signed certificate (its own CA) made with the openssl command-line tool.
bool MakeCert(const std::string& stem) {
  const std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj /CN=weightcast-test -keyout " +
      stem + ".key -out " + stem + ".crt >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

TlsOptions Tls(const std::string& stem, const std::string& ca_stem) {
  return {.enabled = true,
          .cert_file = stem + ".crt",
          .key_file = stem + ".key",
          .ca_file = ca_stem + ".crt"};
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/wc_tls_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    if (!MakeCert(dir_ + "/cluster") || !MakeCert(dir_ + "/rogue")) {
      GTEST_SKIP() << "openssl command-line tool not available to make test certificates";
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(TlsTest, AuthenticatedEncryptedConnectionCarriesChunks) {
  LogCapture log;
  Options server_opts = TestOptions(2, &log);
  server_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  Options client_opts = TestOptions(1, &log);
  client_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  auto server = TcpTransport::Create(server_opts);
  auto client = TcpTransport::Create(client_opts);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->capabilities().name, "tcp+tls");
  EXPECT_FALSE((*client)->capabilities().zero_copy_send);
  auto listener = (*server)->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  auto c = (*client)->Connect((*listener)->address(), 5s);
  ASSERT_TRUE(c.ok()) << c.status().ToString() << log.All();
  auto s = (*listener)->Accept(5s);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->peer().node_id, PeerId(1));
  auto payload = std::make_shared<std::vector<uint8_t>>(Pattern(2 << 20, 9));
  for (uint32_t i = 0; i < 3; ++i) {
    ASSERT_TRUE((*c)->SendChunk({.chunk_index = i}, *payload, payload).ok());
  }
  for (uint32_t i = 0; i < 3; ++i) {
    auto f = (*s)->Receive(5s);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(f->chunk_header()->chunk_index, i);
    auto got = f->chunk_payload();
    ASSERT_EQ(got.size(), payload->size());
    EXPECT_TRUE(std::equal(got.begin(), got.end(), payload->begin()));
  }
  ASSERT_TRUE((*s)->SendControl(Pattern(10, 1)).ok());
  EXPECT_TRUE((*c)->Receive(5s).ok());
}

TEST_F(TlsTest, CertificateFromAnotherCaIsRefused) {
  LogCapture log;
  Options server_opts = TestOptions(2, &log);
  server_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  Options rogue = TestOptions(1, &log);
  rogue.tls = Tls(dir_ + "/rogue", dir_ + "/cluster");
  auto server = TcpTransport::Create(server_opts);
  auto client = TcpTransport::Create(rogue);
  ASSERT_TRUE(server.ok() && client.ok());
  auto listener = (*server)->Listen("127.0.0.1:0");
  auto c = (*client)->Connect((*listener)->address(), 5s);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ((*listener)->Accept(200ms).status().code(), Code::kDeadlineExceeded);
  EXPECT_TRUE(log.Eventually("TLS handshake failed")) << log.All();
}

TEST_F(TlsTest, PlaintextPeerCannotTalkToTlsNode) {
  LogCapture log;
  Options server_opts = TestOptions(2, &log);
  server_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  auto server = TcpTransport::Create(server_opts);
  auto client = TcpTransport::Create(TestOptions(1, &log));
  ASSERT_TRUE(server.ok() && client.ok());
  auto listener = (*server)->Listen("127.0.0.1:0");
  EXPECT_FALSE((*client)->Connect((*listener)->address(), 2s).ok());
  EXPECT_EQ((*listener)->Accept(200ms).status().code(), Code::kDeadlineExceeded);
}

// As TcpTransport.ARefusalThatRacesOurAuthIsStillReported, inside TLS: the refusing side writes
// its reason and closes with our Hello unread, so our Auth meets a reset; the reason is read
// from the records that arrived before it.
TEST_F(TlsTest, ARefusalThatRacesOurAuthIsStillReported) {
  LogCapture log;
  SSL_CTX* context = SSL_CTX_new(TLS_server_method());
  ASSERT_EQ(
      SSL_CTX_use_certificate_file(context, (dir_ + "/cluster.crt").c_str(), SSL_FILETYPE_PEM), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey_file(context, (dir_ + "/cluster.key").c_str(), SSL_FILETYPE_PEM),
            1);
  SSL_CTX_set_num_tickets(context, 0);
  const testing::RawListener listener = testing::RawListen();
  std::thread refuser([&] {
    const int fd = ::accept(listener.fd, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    SSL* ssl = SSL_new(context);
    SSL_set_fd(ssl, fd);
    ASSERT_EQ(SSL_accept(ssl), 1);
    pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
    ASSERT_EQ(::poll(&readable, 1, 5000), 1);  // the client's Hello arrived, unread
    const std::vector<uint8_t> bytes = testing::HelloThenRefusal("no entry for you");
    ASSERT_EQ(SSL_write(ssl, bytes.data(), static_cast<int>(bytes.size())),
              static_cast<int>(bytes.size()));
    ::close(fd);  // no close_notify, bytes unread: the kernel resets the connection
    SSL_free(ssl);
  });
  Options client_opts = TestOptions(1, &log);
  client_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  auto client = TcpTransport::Create(client_opts);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto c = (*client)->Connect(listener.address, 5s);
  refuser.join();
  ::close(listener.fd);
  SSL_CTX_free(context);
  EXPECT_EQ(c.status().code(), Code::kAborted) << c.status().ToString();
  EXPECT_NE(c.status().message().find("no entry for you"), std::string::npos)
      << c.status().ToString();
}

// A certificate that stops passing check_peer while its connection is open (revoked, expired)
// has that connection closed at the next recheck, on both ends, with the reason logged.
TEST_F(TlsTest, AConnectionWhoseCertificateStopsPassingIsClosed) {
  LogCapture log;
  std::atomic<bool> revoked = false;
  auto check = [&](std::span<const uint8_t> der, const PeerInfo&) {
    if (der.empty()) return Unauthenticated("no certificate");
    return revoked ? Unauthenticated("certificate 'weightcast-test' is revoked") : Status::Ok();
  };
  Options server_opts = TestOptions(2, &log);
  server_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  server_opts.tls.check_peer = check;
  server_opts.tls.recheck_every = 50ms;
  Options client_opts = TestOptions(1, &log);
  client_opts.tls = Tls(dir_ + "/cluster", dir_ + "/cluster");
  auto server = TcpTransport::Create(server_opts);
  auto client = TcpTransport::Create(client_opts);
  ASSERT_TRUE(server.ok() && client.ok());
  auto listener = (*server)->Listen("127.0.0.1:0");
  ASSERT_TRUE(listener.ok());
  auto c = (*client)->Connect((*listener)->address(), 5s);
  ASSERT_TRUE(c.ok()) << c.status().ToString() << log.All();
  auto s = (*listener)->Accept(5s);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // Still passing: the rechecks leave it open.
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE((*c)->SendControl(std::vector<uint8_t>{1, 2, 3}).ok());
  ASSERT_TRUE((*s)->Receive(5s).ok());
  revoked = true;
  auto closed = (*s)->Receive(5s);
  EXPECT_EQ(closed.status().code(), Code::kUnauthenticated) << closed.status().ToString();
  EXPECT_NE(closed.status().message().find("no longer passes"), std::string::npos);
  EXPECT_FALSE((*c)->Receive(5s).ok());  // the peer sees the connection end
  EXPECT_TRUE(log.Eventually("is revoked")) << log.All();
}

TEST_F(TlsTest, MissingCertificateFileIsAClearError) {
  Options o = TestOptions(1, nullptr);
  o.tls = Tls(dir_ + "/absent", dir_ + "/cluster");
  auto t = TcpTransport::Create(o);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kInvalidArgument);
  EXPECT_NE(t.status().message().find("absent.crt"), std::string::npos) << t.status().ToString();
}

}  // namespace
}  // namespace weightcast::net
