#include "coord/client.h"

#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "coord/envelope.h"
#include "net/memory_transport.h"

namespace weightcast::coord {
namespace {

constexpr char kSecret[] = "coordinator test secret 0123456789";

net::Options NodeOptions(uint64_t node, net::Role role) {
  net::Options o;
  o.self.cluster_id = "coord-test";
  o.self.node_id = PeerId(node);
  o.self.role = role;
  o.secret = kSecret;
  o.log = [](std::string_view) {};
  return o;
}

// A scripted coordinator: answers each request with whatever `answer` puts in the reply list.
class ScriptedServer {
 public:
  using AnswerFn = std::function<std::vector<wire::Envelope>(const wire::Envelope&)>;

  ScriptedServer(net::MemoryNetwork& network, AnswerFn answer, net::Role role)
      : transport_(network.CreateTransport("coord", NodeOptions(100, role))),
        answer_(std::move(answer)) {
    listener_ = std::move(transport_->Listen("mem:coord")).value();
    thread_ = std::thread([this] {
      auto connection = listener_->Accept();
      if (!connection.ok()) return;
      while (true) {
        auto frame = (*connection)->Receive();
        if (!frame.ok()) return;
        auto request = ParseEnvelope(frame->body);
        if (!request.ok()) return;
        for (const wire::Envelope& reply : answer_(*request)) {
          if (!(*connection)->SendControl(EncodeEnvelope(reply).value()).ok()) return;
        }
      }
    });
  }
  ~ScriptedServer() {
    listener_->Close();
    thread_.join();
  }

 private:
  std::unique_ptr<net::Transport> transport_;
  std::unique_ptr<net::Listener> listener_;
  AnswerFn answer_;
  std::thread thread_;
};

struct ClientFixture {
  net::FakeClock clock;
  net::MemoryNetwork network{clock};
  std::unique_ptr<net::Transport> transport =
      network.CreateTransport("node", NodeOptions(7, net::Role::kAgent));
};

TEST(CoordinatorClient, ErrorReplyBecomesStatus) {
  ClientFixture f;
  ScriptedServer server(
      f.network,
      [](const wire::Envelope& request) {
        wire::Envelope reply;
        reply.set_request_id(request.request_id());
        *reply.mutable_error() = ErrorFromStatus(Unauthenticated("bad tag"));
        return std::vector<wire::Envelope>{reply};
      },
      net::Role::kCoordinator);
  auto client = CoordinatorClient::Connect(*f.transport, "mem:coord");
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  auto published = (*client)->Publish(std::vector<uint8_t>{1, 2, 3});
  ASSERT_FALSE(published.ok());
  EXPECT_EQ(published.status().code(), Code::kUnauthenticated);
  EXPECT_EQ(published.status().message(), "bad tag");
}

TEST(CoordinatorClient, UnknownErrorCodeIsInternalNotOk) {
  wire::Error error;
  error.set_code(0);
  error.set_message("zero");
  EXPECT_EQ(StatusFromError(error).code(), Code::kInternal);
  error.set_code(999);
  EXPECT_EQ(StatusFromError(error).code(), Code::kInternal);
  error.set_code(static_cast<uint32_t>(Code::kNotFound));
  EXPECT_EQ(StatusFromError(error), NotFound("zero"));
}

TEST(CoordinatorClient, AnErrorsReasonCrossesTheWire) {
  const Status fenced =
      FailedPrecondition("fenced by another writer").WithReason(Reason::kWriterConflict);
  const Status back = StatusFromError(ErrorFromStatus(fenced));
  EXPECT_EQ(back, fenced);
  EXPECT_EQ(back.reason(), Reason::kWriterConflict);
  EXPECT_TRUE(IsWriterConflict(back));
  EXPECT_EQ(ConnectErrorCause(back), "writer_conflict");
  // A reason this build does not know reads as none; the code and message still arrive.
  wire::Error future = ErrorFromStatus(fenced);
  future.set_reason(200);
  EXPECT_EQ(StatusFromError(future).reason(), Reason::kNone);
  EXPECT_EQ(StatusFromError(future).code(), Code::kFailedPrecondition);
}

TEST(CoordinatorClient, CausesComeFromTheReasonNotTheWords) {
  // The same words without the reason are an ordinary refusal.
  EXPECT_FALSE(IsWriterConflict(FailedPrecondition("channel c already has a writer: node 3")));
  EXPECT_EQ(ConnectErrorCause(FailedPrecondition("wrong cluster, protocol version")), "refused");
  EXPECT_FALSE(IsStandbyRefusal(Unavailable("standby coordinator: the leader is at a:1")));
  EXPECT_TRUE(IsStandbyRefusal(
      Unavailable("standby coordinator: the leader is at a:1").WithReason(Reason::kStandby)));
  EXPECT_EQ(ConnectErrorCause(
                FailedPrecondition("no words to go by").WithReason(Reason::kProtocolVersion)),
            "protocol_version");
}

TEST(CoordinatorClient, SkipsStaleRepliesAndMatchesRequestId) {
  ClientFixture f;
  ScriptedServer server(
      f.network,
      [](const wire::Envelope& request) {
        wire::Envelope stale;
        stale.set_request_id(request.request_id() - 1);
        stale.mutable_publish_reply()->set_version(999);
        wire::Envelope reply;
        reply.set_request_id(request.request_id());
        reply.mutable_publish_reply()->set_version(5);
        return std::vector<wire::Envelope>{stale, reply};
      },
      net::Role::kCoordinator);
  auto client = CoordinatorClient::Connect(*f.transport, "mem:coord");
  ASSERT_TRUE(client.ok());
  auto first = (*client)->Publish(std::vector<uint8_t>{1});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, Version(5));
  auto second = (*client)->Publish(std::vector<uint8_t>{1});
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, Version(5));
}

TEST(CoordinatorClient, WrongReplyTypeIsCorrupt) {
  ClientFixture f;
  ScriptedServer server(
      f.network,
      [](const wire::Envelope& request) {
        wire::Envelope reply;
        reply.set_request_id(request.request_id());
        reply.mutable_rollback_reply()->set_version(1);
        return std::vector<wire::Envelope>{reply};
      },
      net::Role::kCoordinator);
  auto client = CoordinatorClient::Connect(*f.transport, "mem:coord");
  ASSERT_TRUE(client.ok());
  auto status = (*client)->GetStatus();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.status().code(), Code::kCorrupt);
}

TEST(CoordinatorClient, RefusesAPeerThatIsNotACoordinator) {
  ClientFixture f;
  ScriptedServer server(
      f.network, [](const wire::Envelope&) { return std::vector<wire::Envelope>{}; },
      net::Role::kAgent);
  auto client = CoordinatorClient::Connect(*f.transport, "mem:coord");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Code::kFailedPrecondition);
}

TEST(CoordinatorClient, RefusesOversizedMessages) {
  wire::Envelope envelope;
  envelope.mutable_publish()->set_signed_manifest(std::string(kMaxEnvelopeBytes + 1, 'x'));
  auto encoded = EncodeEnvelope(envelope);
  ASSERT_FALSE(encoded.ok());
  EXPECT_EQ(encoded.status().code(), Code::kOutOfRange);
  std::vector<uint8_t> big(kMaxEnvelopeBytes + 1);
  EXPECT_EQ(ParseEnvelope(big).status().code(), Code::kOutOfRange);
  std::vector<uint8_t> garbage{0xff, 0xff, 0xff};
  EXPECT_EQ(ParseEnvelope(garbage).status().code(), Code::kCorrupt);
}

// A coordinator that answers nothing: these connects fail in the handshake.
std::vector<wire::Envelope> NoAnswer(const wire::Envelope&) { return {}; }

TEST(CoordinatorClient, WrongSecretIsAPermanentErrorThatSaysSo) {
  ClientFixture f;
  ScriptedServer server(f.network, NoAnswer, net::Role::kCoordinator);
  net::Options options = NodeOptions(8, net::Role::kAgent);
  options.secret = "another secret, not the coordinator's";
  auto transport = f.network.CreateTransport("wrong", options);
  auto client = CoordinatorClient::Connect(*transport, "mem:coord");
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), Code::kUnauthenticated);
  EXPECT_NE(client.status().message().find(
                "the coordinator refused our handshake: wrong cluster secret?"),
            std::string::npos)
      << client.status().message();
  EXPECT_TRUE(IsPermanentConnectError(client.status()));
  EXPECT_EQ(ConnectErrorCause(client.status()), "wrong_secret");
}

TEST(CoordinatorClient, WrongClusterIsAPermanentErrorThatSaysSo) {
  ClientFixture f;
  ScriptedServer server(f.network, NoAnswer, net::Role::kCoordinator);
  net::Options options = NodeOptions(8, net::Role::kAgent);
  options.self.cluster_id = "elsewhere";
  auto transport = f.network.CreateTransport("other", options);
  auto client = CoordinatorClient::Connect(*transport, "mem:coord");
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(IsPermanentConnectError(client.status())) << client.status().ToString();
  EXPECT_EQ(ConnectErrorCause(client.status()), "wrong_cluster") << client.status().ToString();
}

TEST(CoordinatorClient, NotACoordinatorIsPermanent) {
  ClientFixture f;
  ScriptedServer server(f.network, NoAnswer, net::Role::kAgent);
  auto client = CoordinatorClient::Connect(*f.transport, "mem:coord");
  ASSERT_FALSE(client.ok());
  EXPECT_TRUE(IsPermanentConnectError(client.status()));
  EXPECT_EQ(ConnectErrorCause(client.status()), "not_coordinator");
}

TEST(CoordinatorClient, UnreachableIsWorthRetrying) {
  ClientFixture f;
  auto client = CoordinatorClient::Connect(*f.transport, "mem:nobody");
  ASSERT_FALSE(client.ok());
  EXPECT_FALSE(IsPermanentConnectError(client.status())) << client.status().ToString();
  EXPECT_FALSE(IsPermanentConnectError(Unavailable("connect: connection refused")));
  EXPECT_EQ(ConnectErrorCause(Unavailable("connect: connection refused")), "unreachable");
  EXPECT_EQ(ConnectErrorCause(DeadlineExceeded("connect timed out")), "unreachable");
}

}  // namespace
}  // namespace weightcast::coord
