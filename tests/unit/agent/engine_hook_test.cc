#include "agent/engine_hook.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "testing/temp_dir.h"

namespace weightcast::agent {
namespace {

using std::chrono::milliseconds;

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

EngineHook Make(EngineHookOptions o) {
  auto h = EngineHook::Create(std::move(o));
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  return std::move(h).value();
}

TEST(EngineHook, NoHookConfiguredIsANoOp) {
  EngineHook h = Make({});
  EXPECT_FALSE(h.enabled());
  EXPECT_TRUE(h.Run("policy", Version(3), "/nonexistent").ok());
}

TEST(EngineHook, CommandGetsChannelVersionAndDirAsArgumentsAndEnvironment) {
  testing::TempDir tmp;
  auto out = tmp.path() / "out";
  EngineHookOptions o;
  // The arguments are appended to the command line: the last echo prints them.
  o.command =
      "printf '%s|%s|%s\\n' \"$WEIGHTCAST_CHANNEL\" \"$WEIGHTCAST_VERSION\" "
      "\"$WEIGHTCAST_DIR\" > " +
      out.string() + "; echo >> " + out.string();
  EngineHook h = Make(o);
  ASSERT_TRUE(h.Run("policy", Version(7), "/data/policy/versions/7").ok());
  EXPECT_EQ(ReadFile(out), "policy|7|/data/policy/versions/7\npolicy 7 /data/policy/versions/7\n");

  // A script gets them as $1 $2 $3.
  auto script = tmp.path() / "reload.sh";
  std::ofstream(script) << "#!/bin/sh\necho \"$1 $2 $3\" > " << out.string() << "\n";
  std::filesystem::permissions(script, std::filesystem::perms::owner_all);
  o.command = script.string();
  ASSERT_TRUE(Make(o).Run("ch", Version(12), "/d ir").ok());
  EXPECT_EQ(ReadFile(out), "ch 12 /d ir\n");
}

TEST(EngineHook, FailingCommandReportsStatusAndOutput) {
  EngineHookOptions o;
  o.command = "echo 'engine refused the weights' >&2; exit 3 #";
  Status s = Make(o).Run("policy", Version(2), "/tmp");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_NE(s.message().find("exited with status 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("engine refused the weights"), std::string::npos) << s.message();
}

TEST(EngineHook, MissingCommandFails) {
  EngineHookOptions o;
  o.command = "/nonexistent/reload";
  Status s = Make(o).Run("policy", Version(2), "/tmp");
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_NE(s.message().find("status 127"), std::string::npos) << s.message();
}

TEST(EngineHook, SlowCommandIsKilledWithWhatItStarted) {
  testing::TempDir tmp;
  auto marker = tmp.path() / "late";
  EngineHookOptions o;
  // A background child that would write the marker after the timeout must die too.
  o.command = "(sleep 1; touch " + marker.string() + ") & sleep 5 #";
  o.timeout = milliseconds(200);
  auto start = std::chrono::steady_clock::now();
  Status s = Make(o).Run("policy", Version(2), "/tmp");
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << s.ToString();
  EXPECT_LT(took, std::chrono::seconds(2));
  std::this_thread::sleep_for(milliseconds(1200));
  EXPECT_FALSE(std::filesystem::exists(marker)) << "the hook's child outlived the timeout";
}

TEST(EngineHook, RejectsBadUrls) {
  for (const char* url : {"https://x/", "ftp://x", "http://", "http://:80/", "http://h:0/",
                          "http://h:99999/", "http://h:8a/", "http://[::1/"}) {
    EngineHookOptions o;
    o.url = url;
    auto h = EngineHook::Create(o);
    ASSERT_FALSE(h.ok()) << url;
    EXPECT_EQ(h.status().code(), Code::kInvalidArgument);
  }
  EngineHookOptions o;
  o.timeout = milliseconds(0);
  EXPECT_FALSE(EngineHook::Create(o).ok());
}

class HookServer {
 public:
  HookServer() {
    server_.Post("/reload", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      body_ = req.body;
      content_type_ = req.get_header_value("Content-Type");
      res.status = status_;
      res.set_content(status_ == 200 ? "ok" : "cannot load: shape mismatch", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(milliseconds(1));
  }
  ~HookServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  void set_status(int s) {
    std::lock_guard lock(mu_);
    status_ = s;
  }
  std::string body() {
    std::lock_guard lock(mu_);
    return body_;
  }
  std::string content_type() {
    std::lock_guard lock(mu_);
    return content_type_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  int status_ = 200;
  std::string body_, content_type_;
};

TEST(EngineHook, PostsJsonToTheUrl) {
  HookServer server;
  EngineHookOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(server.port()) + "/reload";
  o.timeout = milliseconds(5000);
  EngineHook h = Make(o);
  ASSERT_TRUE(h.Run("policy", Version(9), "/data/policy/versions/9").ok());
  auto j = nlohmann::json::parse(server.body());
  EXPECT_EQ(j["channel"], "policy");
  EXPECT_EQ(j["version"], 9);
  EXPECT_EQ(j["dir"], "/data/policy/versions/9");
  EXPECT_EQ(server.content_type(), "application/json");

  server.set_status(500);
  Status s = h.Run("policy", Version(10), "/x");
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_NE(s.message().find("HTTP 500"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("shape mismatch"), std::string::npos) << s.message();
}

TEST(EngineHook, UnreachableUrlIsUnavailable) {
  // Bind and close a port so that nothing listens there.
  int port;
  {
    httplib::Server probe;
    port = probe.bind_to_any_port("127.0.0.1");
  }
  EngineHookOptions o;
  o.url = "http://127.0.0.1:" + std::to_string(port) + "/reload";
  o.timeout = milliseconds(300);
  Status s = Make(o).Run("policy", Version(1), "/x");
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
}

}  // namespace
}  // namespace weightcast::agent
