#include "coord/etcd_coordinator.h"

#include <thread>

#include "coord/etcd_election.h"
#include "coord/etcd_log_store.h"
#include "coord/standby.h"

namespace weightcast::coord {
namespace {

using std::chrono::milliseconds;

}  // namespace

EtcdCoordinator::EtcdCoordinator(EtcdCoordinatorOptions options) : options_(std::move(options)) {}

EtcdCoordinator::~EtcdCoordinator() { Stop(); }

bool EtcdCoordinator::Stopping() {
  std::lock_guard lock(mu_);
  return stopping_;
}

void EtcdCoordinator::Pause(milliseconds d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, d, [this] { return stopping_; });
}

void EtcdCoordinator::Stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  if (serving_ != nullptr) serving_->Stop();
  if (stop_standby_) stop_standby_();
  cv_.notify_all();
}

Result<std::unique_ptr<net::Listener>> EtcdCoordinator::Listen(const std::string& address) {
  // The previous phase's listener was just closed: its port may take a moment to be free.
  Status last = Status::Ok();
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto listener = options_.transport->Listen(address);
    if (listener.ok()) return listener;
    last = listener.status();
    Pause(milliseconds(20));
    if (Stopping()) break;
  }
  return last;
}

Status EtcdCoordinator::Run() {
  if (options_.transport == nullptr || !options_.coordinator_options) {
    return InvalidArgument("etcd coordinator: transport and coordinator options are needed");
  }
  if (options_.lease_ttl < std::chrono::seconds(2)) {
    return InvalidArgument("--lease-ttl must be at least 2s (etcd's shortest lease)");
  }
  etcd::ClientOptions client_options;
  client_options.timeout = options_.etcd_timeout;
  client_options.ca_file = options_.etcd_ca_file;
  client_options.cert_file = options_.etcd_cert_file;
  client_options.key_file = options_.etcd_key_file;
  WC_ASSIGN_OR_RETURN(std::unique_ptr<etcd::Client> client,
                      etcd::Client::Create(options_.endpoints, client_options));
  const EtcdKeys keys{options_.prefix};
  std::string bound = options_.listen;
  std::unique_ptr<Election> election;
  bool first = true;
  const auto renew_every = std::chrono::duration_cast<milliseconds>(options_.lease_ttl) / 3;

  while (!Stopping()) {
    // Standing by.
    WC_ASSIGN_OR_RETURN(std::unique_ptr<net::Listener> listener, Listen(bound));
    if (first) {
      bound = listener->address();
      if (options_.advertise.empty()) options_.advertise = bound;
      election = std::make_unique<Election>(*client, keys, options_.advertise, options_.lease_ttl);
      if (options_.on_listening) options_.on_listening(bound);
      first = false;
    }
    auto leader = std::make_shared<std::pair<std::mutex, std::string>>();
    std::unique_ptr<StandbyServer> standby = StandbyServer::Start(std::move(listener), [leader] {
      std::lock_guard lock(leader->first);
      return leader->second;
    });
    {
      std::lock_guard lock(mu_);
      stop_standby_ = [&standby] { standby->Stop(); };
    }
    std::shared_ptr<LeaderTerm> term;
    std::string last_seen = "\n";  // logs each change of leader once
    std::string last_error;
    while (!Stopping()) {
      auto outcome = election->Campaign();
      if (!outcome.ok()) {
        if (outcome.status().message() != last_error) {
          options_.log("standing by: etcd cannot elect now: " + outcome.status().ToString());
          last_error = outcome.status().message();
        }
        Pause(milliseconds(500));
        continue;
      }
      last_error.clear();
      if (outcome->term != nullptr) {
        term = outcome->term;
        break;
      }
      {
        std::lock_guard lock(leader->first);
        leader->second = outcome->leader;
      }
      if (outcome->leader != last_seen) {
        options_.log("standing by: the leader is " +
                     (outcome->leader.empty() ? std::string("unknown") : outcome->leader));
        last_seen = outcome->leader;
      }
      // The watch returns when the leader key changes (resigned, expired) or after a while,
      // so that a missed event costs at most that long.
      Status watched = election->WaitForChange(outcome->watch_from, milliseconds(1000));
      if (!watched.ok()) Pause(milliseconds(200));
    }
    {
      std::lock_guard lock(mu_);
      stop_standby_ = nullptr;
    }
    standby->Stop();
    standby.reset();
    if (term == nullptr) break;  // stopped while standing by
    if (Stopping()) {
      election->Resign(*term);
      break;
    }

    // Leading.
    options_.log("leading: won the election (term " + std::to_string(term->revision()) +
                 ", lease TTL " + std::to_string(options_.lease_ttl.count()) + " s)");
    auto coordinator_options = options_.coordinator_options();
    if (!coordinator_options.ok()) {
      election->Resign(*term);
      return coordinator_options.status();
    }
    coordinator_options->open_store = [&client, keys, term]() -> Result<std::unique_ptr<LogStore>> {
      return std::unique_ptr<LogStore>(new EtcdLogStore(*client, keys, term));
    };
    auto coordinator = Coordinator::Open(std::move(*coordinator_options));
    if (!coordinator.ok()) {
      options_.log("leading: cannot load the log from etcd: " + coordinator.status().ToString());
      election->Resign(*term);
      const Code code = coordinator.status().code();
      if (code == Code::kUnavailable || code == Code::kAborted) {
        Pause(milliseconds(500));
        continue;  // etcd lost its quorum meanwhile: stand by and try again
      }
      return coordinator.status();
    }
    WC_ASSIGN_OR_RETURN(std::unique_ptr<net::Listener> serving_listener, Listen(bound));
    {
      std::lock_guard lock(mu_);
      serving_ = coordinator->get();
      if (stopping_) serving_->Stop();
    }
    std::thread serve([&] { (*coordinator)->Serve(*serving_listener); });
    bool renew_failing = false;
    while (!Stopping() && !term->lost()) {
      Pause(renew_every);
      if (Stopping()) break;
      Status renewed = election->Renew(*term);
      if (!renewed.ok() && !renew_failing) {
        options_.log("leading: cannot renew the lease: " + renewed.ToString() +
                     "; serving what is decided, nothing commits until etcd answers");
      } else if (renewed.ok() && renew_failing) {
        options_.log("leading: etcd answers again");
      }
      renew_failing = !renewed.ok();
    }
    {
      std::lock_guard lock(mu_);
      serving_ = nullptr;
    }
    (*coordinator)->Stop();
    serve.join();
    coordinator->reset();
    // Whatever ended the term, its lease goes now: a term lost to a fenced or replayed write may
    // still hold the leader key, and nobody (this process included) should wait out its TTL.
    election->Resign(*term);
    if (Stopping()) {
      options_.log("stopped; resigned the leadership");
      break;
    }
    options_.log("standing by: this coordinator no longer leads: " + term->lost_reason());
  }
  return Status::Ok();
}

}  // namespace weightcast::coord
