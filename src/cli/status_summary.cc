// The summaries `weightcast status` draws (status_view.h): each channel's progress over its
// followers, and the large-fleet summary by state, progress and rack. Pure functions of the
// coordinator's FleetStatus snapshots; the drawing is status_view.cc.
#include "cli/status_parts.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace weightcast::cli {

namespace wire = coord::wire;

namespace status_parts {

double Fraction(uint64_t done, uint64_t total) {
  if (total == 0) return 0;
  return static_cast<double>(std::min(done, total)) / static_cast<double>(total);
}

std::string_view PhaseName(wire::Phase phase) {
  switch (phase) {
    case wire::PHASE_IDLE:
      return "IDLE";
    case wire::PHASE_FETCHING:
      return "FETCHING";
    case wire::PHASE_PREPARED:
      return "PREPARED";
    case wire::PHASE_COMMITTED:
      return "COMMITTED";
    case wire::PHASE_FAILED:
      return "FAILED";
    case wire::PHASE_SEEDING:
      return "SEEDING";
    default:
      return "?";
  }
}

const wire::VersionEntry* FindEntry(const wire::ChannelLog& log, uint64_t version) {
  for (const wire::VersionEntry& e : log.versions()) {
    if (e.version() == version) return &e;
  }
  return nullptr;
}

bool HasCurrent(const wire::ChannelProgress& p, uint64_t target, uint64_t newest) {
  if (target == 0) return false;
  if (p.version() == target && p.phase() == wire::PHASE_COMMITTED) return true;
  return target < newest ? p.current_version() == target : p.current_version() >= target;
}

}  // namespace status_parts

namespace {

using status_parts::FindEntry;
using status_parts::Fraction;
using status_parts::HasCurrent;
using status_parts::PhaseName;

const wire::ChannelProgress* FindProgress(const wire::NodeStatus& node, std::string_view channel) {
  for (const wire::ChannelProgress& p : node.channels()) {
    if (p.channel() == channel) return &p;
  }
  return nullptr;
}

// What the bars of `log` measure: the newest version, unless it was aborted (a rollback past it
// or a failed rollout) while the fleet has a current version to stay on.
uint64_t TargetVersion(const wire::ChannelLog& log) {
  if (log.versions().empty()) return 0;
  const wire::VersionEntry& newest = log.versions(log.versions_size() - 1);
  if (newest.decision() == wire::DECISION_ABORT && log.current_version() != 0 &&
      log.current_version() < newest.version() && FindEntry(log, log.current_version())) {
    return log.current_version();
  }
  return newest.version();
}

// Summary of one channel without rates.
ChannelSummary SummarizeChannel(const wire::FleetStatus& status, const wire::ChannelLog& log) {
  ChannelSummary s;
  s.channel = log.channel();
  s.current_version = log.current_version();
  if (!log.versions().empty()) {
    s.entry = log.versions(log.versions_size() - 1);
    s.version = s.entry.version();
    s.target = TargetVersion(log);
    s.target_entry = *FindEntry(log, s.target);
  }
  const uint64_t v = s.target;
  const wire::VersionEntry& e = s.target_entry;
  const bool delta_version = e.base_version() != 0 && e.payload_bytes() > 0;
  for (const wire::NodeStatus& node : status.nodes()) {
    const wire::ChannelProgress* p = FindProgress(node, log.channel());
    if (p == nullptr) continue;
    // Wire bytes count whoever moved them: a publisher leaves once its --until holds, and its
    // upload of `v` is part of the rollout all the same.
    if (v != 0 && p->version() == v) {
      s.bytes_received += p->bytes_received();
      s.bytes_sent += p->bytes_sent();
    }
    if (node.left()) continue;  // gone on purpose: neither a follower nor dead
    if (node.source()) continue;
    if (!node.alive()) {
      ++s.dead;
      continue;
    }
    ++s.followers;
    if (v == 0) continue;
    // What this node wants of v: its own figures once it reported on v (a tensor subset wants
    // fewer chunks), else the whole version. A node fetching a delta wants its payloads (and
    // one that holds the base and has not started will): wire bytes against payload_bytes.
    const bool on_v = p->version() == v && p->bytes_total() > 0;
    const bool delta =
        delta_version && (on_v ? p->delta()
                               : p->version() != v && p->current_version() == e.base_version() &&
                                     node.tensor_patterns_size() == 0);
    uint64_t want_bytes = on_v ? p->bytes_total() : e.total_bytes();
    if (delta) {
      want_bytes = e.payload_bytes();
      ++s.delta_followers;
    }
    const uint64_t want_chunks = on_v ? p->chunks_total() : e.chunk_count();
    s.bytes_total += want_bytes;
    s.chunks_total += want_chunks;
    const bool committed = HasCurrent(*p, v, s.version);
    const bool prepared = !committed && p->version() == v && p->phase() == wire::PHASE_PREPARED;
    if (committed) {
      ++s.committed;
    } else if (prepared) {
      ++s.prepared;
      if (node.tensor_patterns_size() > 0) ++s.subset_prepared;
    }
    if (committed || prepared) {
      s.bytes_done += want_bytes;
      s.chunks_done += want_chunks;
    } else if (on_v) {
      if (p->phase() == wire::PHASE_FAILED) ++s.failed;
      s.bytes_done += std::min(delta ? p->bytes_received() : p->bytes_done(), want_bytes);
      s.chunks_done += std::min<uint64_t>(p->chunks_done(), want_chunks);
    } else if (p->version() == v && p->phase() == wire::PHASE_FAILED) {
      ++s.failed;
    }
  }
  return s;
}

}  // namespace

std::vector<ChannelSummary> Summarize(const wire::FleetStatus& now,
                                      const wire::FleetStatus* earlier, std::string_view channel) {
  std::vector<ChannelSummary> out;
  for (const wire::ChannelLog& log : now.channels()) {
    if (!channel.empty() && log.channel() != channel) continue;
    ChannelSummary s = SummarizeChannel(now, log);
    if (earlier != nullptr && s.target != 0 && now.now_unix_ms() > earlier->now_unix_ms()) {
      for (const wire::ChannelLog& before_log : earlier->channels()) {
        if (before_log.channel() != log.channel()) continue;
        ChannelSummary before = SummarizeChannel(*earlier, before_log);
        if (before.target != s.target) break;  // a new version: its rate starts from scratch
        const double dt = static_cast<double>(now.now_unix_ms() - earlier->now_unix_ms()) / 1000;
        // Sums over live nodes can shrink when a node dies; a negative rate means nothing.
        auto rate = [dt](uint64_t after, uint64_t before_value) {
          return after > before_value ? static_cast<double>(after - before_value) / dt : 0.0;
        };
        s.verified_bytes_per_s = rate(s.bytes_done, before.bytes_done);
        s.received_bytes_per_s = rate(s.bytes_received, before.bytes_received);
        break;
      }
    }
    if (s.target != 0 && s.followers > 0 && s.bytes_done >= s.bytes_total &&
        s.nodes_done() == s.followers) {
      s.eta_s = 0;
    } else if (s.verified_bytes_per_s && *s.verified_bytes_per_s > 0) {
      s.eta_s = static_cast<double>(s.bytes_total - std::min(s.bytes_done, s.bytes_total)) /
                *s.verified_bytes_per_s;
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// How much of `target` a node has, 0 to 1: all of it once current (or PREPARED), else its chunks.
double NodeProgress(const wire::ChannelProgress& p, uint64_t target, uint64_t newest) {
  if (target == 0) return 0;
  if (p.phase() != wire::PHASE_FAILED && HasCurrent(p, target, newest)) return 1;
  if (p.version() != target) return 0;
  if (p.phase() == wire::PHASE_PREPARED) return 1;
  return p.chunks_total() == 0 ? 0 : Fraction(p.chunks_done(), p.chunks_total());
}

// One follower of a channel, as the summary sees it.
struct Follower {
  const wire::NodeStatus* node;
  const wire::ChannelProgress* progress;
  std::string state;  // phase name, or "dead"
  double fraction;
  bool lagging = false;
};

std::vector<Follower> Followers(const wire::FleetStatus& now, const ChannelSummary& channel) {
  std::vector<Follower> out;
  for (const wire::NodeStatus& node : now.nodes()) {
    const wire::ChannelProgress* p = FindProgress(node, channel.channel);
    if (node.left() || p == nullptr) continue;
    out.push_back({&node, p, node.alive() ? std::string(PhaseName(p->phase())) : "dead",
                   NodeProgress(*p, channel.target, channel.version)});
  }
  // Lagging: below half the best live node's progress once it is halfway, or committed on an
  // older version than the fleet's.
  double best = 0;
  for (const Follower& f : out) {
    if (f.node->alive()) best = std::max(best, f.fraction);
  }
  for (Follower& f : out) {
    const bool behind =
        f.state == "COMMITTED" && f.progress->current_version() != channel.current_version;
    f.lagging = f.node->alive() && f.state != "FAILED" && f.fraction < 1 &&
                ((best >= 0.5 && f.fraction < best / 2) || behind);
  }
  return out;
}

std::vector<std::pair<std::string, uint32_t>> CountStates(const std::vector<Follower>& followers,
                                                          uint32_t left) {
  std::map<std::string, uint32_t> counts;
  for (const Follower& f : followers) {
    ++counts[f.state];
    if (f.lagging) ++counts["lagging"];
  }
  if (left > 0) counts["left"] = left;
  std::vector<std::pair<std::string, uint32_t>> out;
  for (std::string_view name : {"FAILED", "dead", "lagging", "IDLE", "FETCHING", "PREPARED",
                                "COMMITTED", "SEEDING", "left"}) {
    auto it = counts.find(std::string(name));
    if (it == counts.end()) continue;
    out.emplace_back(*it);
    counts.erase(it);
  }
  for (const auto& rest : counts) out.push_back(rest);  // a phase this view does not know
  return out;
}

std::vector<FleetSummary::Rack> RackTotals(const std::vector<Follower>& followers) {
  std::map<std::string, FleetSummary::Rack> racks;
  for (const Follower& f : followers) {
    if (f.node->source()) continue;
    FleetSummary::Rack& r = racks[f.node->rack()];
    r.name = f.node->rack();
    ++r.agents;
    if (!f.node->alive()) {
      ++r.dead;
    } else if (f.state == "FAILED") {
      ++r.failed;
    } else if (f.fraction >= 1) {
      ++r.done;
    }
    r.progress_sum += f.fraction;
  }
  std::vector<FleetSummary::Rack> out;
  for (auto& [name, rack] : racks) out.push_back(std::move(rack));
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.progress_sum / a.agents < b.progress_sum / b.agents;
  });
  return out;
}

}  // namespace

namespace status_parts {

FleetSummary SummarizeFleetChannel(const wire::FleetStatus& now, const ChannelSummary& channel) {
  FleetSummary out;
  out.channel = channel.channel;
  const std::vector<Follower> followers = Followers(now, channel);
  out.nodes = static_cast<uint32_t>(followers.size());
  uint32_t left = 0;
  for (const wire::NodeStatus& node : now.nodes()) {
    if (node.left() && FindProgress(node, channel.channel) != nullptr) ++left;
  }
  out.states = CountStates(followers, left);
  std::vector<const Follower*> slow;
  for (const Follower& f : followers) {
    if (f.node->source() || !f.node->alive()) continue;
    ++out.histogram[f.fraction >= 1 ? 10
                                    : std::min<size_t>(9, static_cast<size_t>(f.fraction * 10))];
    if (f.state != "FAILED" && f.fraction < 1) slow.push_back(&f);
  }
  std::stable_sort(slow.begin(), slow.end(), [](const Follower* a, const Follower* b) {
    if (a->fraction != b->fraction) return a->fraction < b->fraction;
    return a->node->node_id() < b->node->node_id();
  });
  slow.resize(std::min(slow.size(), FleetSummary::kLeastAdvanced));
  for (const Follower* f : slow) {
    out.least_advanced.push_back({f->node->node_id(), f->node->hostname(), f->node->rack(),
                                  f->state + (f->lagging ? " (lagging)" : ""), f->fraction});
  }
  out.racks = RackTotals(followers);
  return out;
}

}  // namespace status_parts

std::vector<FleetSummary> SummarizeFleet(const wire::FleetStatus& now, std::string_view channel) {
  std::vector<FleetSummary> out;
  for (const ChannelSummary& s : Summarize(now, nullptr, channel)) {
    out.push_back(status_parts::SummarizeFleetChannel(now, s));
  }
  return out;
}

}  // namespace weightcast::cli
