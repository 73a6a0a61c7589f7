// `weightcast sim`: simulate one broadcast over a modelled fleet with the real swarm scheduler
// on a virtual clock, and print where it lands against the lower bound and reference schedules.
// docs/simulator.md describes the model; the last line of output is one JSON object.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "cli/command.h"
#include "codec/version_codec.h"
#include "format/safetensors.h"
#include "manifest/builder.h"
#include "manifest/chunk_size.h"
#include "rollout/types.h"
#include "sim/fleet.h"
#include "sim/progress_plot.h"
#include "sim/reference.h"
#include "sim/rollout.h"
#include "swarm/tuning.h"
#include "synth/model.h"
#include "util/file.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

struct SimFlags {
  uint32_t nodes = 100;
  std::string size = "500GB";
  std::string chunk = "auto";  // the publisher's rule for --size (ChooseChunkSize)
  double gbps = 10;
  double origin_gbps = 0;  // an HTTP origin's aggregate upload (0: none)
  uint32_t origin_fetchers = 16;
  bool shared = false;
  double latency_us = 100;
  uint32_t rack_size = 0;
  double oversubscription = 1;
  double die = 0, die_at = 0.5;
  double stragglers = 0, straggler_speed = 0.5;
  double late = 0, late_at = 0.25;
  double source_leaves_at = -1;
  // A delta step instead of a full version: every receiver holds the base and fetches payloads
  // for the changed chunks (--changed of them), each --delta-ratio x its chunk, or the ratios the
  // real encoder gives on a synthetic RL step ("encoder").
  bool delta = false;
  std::string delta_ratio = "encoder";
  double changed = 1.0;
  double bad = 0;  // receivers whose every upload fails its check
  // Scheduler settings: an agent's defaults (swarm/tuning.h) unless a flag says otherwise.
  swarm::Tuning tuning{};
  std::string timeout = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           swarm::Tuning{}.request_timeout)
                                           .count()) +
                        "ms";
  double rebalance_ms = 100;
  uint64_t seed = 1;
  uint32_t threads = 0;
  std::string out;
  bool plot = false;
  bool references = true;
  // The rollout after distribution (sim/rollout.h); empty: none.
  std::string commit_policies = "all,quorum:0.9,all@30m";
  std::string prepare_deadline = "10m";
  std::string heartbeat = "1s";
  std::string heartbeat_timeout = "3s";
  double control_latency_us = 100;
  // Control channels to run each policy over: long-poll (the agent's), push (periodic
  // heartbeats plus one at once on progress), periodic (heartbeats only).
  std::string control = "long-poll,push";
  double persist_ms = 5;
  double commit_ms = 10;
};

const char* RoleName(sim::NodeRole role) {
  switch (role) {
    case sim::NodeRole::kHealthy:
      return "healthy";
    case sim::NodeRole::kDies:
      return "dies";
    case sim::NodeRole::kStraggler:
      return "straggler";
    case sim::NodeRole::kLate:
      return "late";
    case sim::NodeRole::kBad:
      return "bad";
  }
  return "?";
}

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(q * v.size())) - 1);
  return v[std::max<size_t>(i, 0)];
}

std::string Fixed(double v, int digits = 1) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

Status WriteOutputs(const SimFlags& f, const sim::FleetResult& r) {
  std::filesystem::path dir(f.out);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError("sim: cannot create " + f.out + ": " + ec.message());
  std::ostringstream nodes;
  nodes << "node,role,completed_at_s,bytes_in,bytes_out\n";
  for (const sim::NodeResult& n : r.nodes) {
    nodes << n.node << ',' << (n.node == 0 ? "source" : RoleName(n.role)) << ','
          << (n.completed_at >= 0 ? Fixed(n.completed_at, 3) : "") << ',' << Fixed(n.bytes_in, 0)
          << ',' << Fixed(n.bytes_out, 0) << '\n';
  }
  WC_RETURN_IF_ERROR(WriteFileAtomic(dir / "completion.csv", nodes.str()));
  std::ostringstream progress;
  progress << "t_s,fraction,complete\n";
  for (const sim::ProgressSample& p : r.progress) {
    progress << Fixed(p.t, 3) << ',' << Fixed(p.fraction, 5) << ',' << p.complete << '\n';
  }
  WC_RETURN_IF_ERROR(WriteFileAtomic(dir / "progress.csv", progress.str()));
  if (!f.plot) return Status::Ok();
  // Completion-time CDF and fleet progress, side by side: the plot bench/cluster draws too
  // (src/sim/progress_plot.gnuplot), with its inputs set first so that sim.gnuplot reruns alone.
  auto quoted = [](const std::filesystem::path& p) {
    std::string q = "'";
    for (char c : p.string()) q += c == '\'' ? std::string("''") : std::string(1, c);
    return q + "'";
  };
  std::ostringstream gp;
  gp << "completion = " << quoted(dir / "completion.csv") << "\n"
     << "progress = " << quoted(dir / "progress.csv") << "\n"
     << "output = " << quoted(dir / "sim.png") << "\n"
     << "receivers = " << (r.nodes.size() > 1 ? r.nodes.size() - 1 : 1) << "\n"
     << "bound = " << r.lower_bound << "\n"
     << "title = 'weightcast sim'\nprogress_title = 'bytes verified'\n"
     << assets::kProgressPlotGnuplot;
  WC_RETURN_IF_ERROR(WriteFileAtomic(dir / "sim.gnuplot", gp.str()));
  const std::string cmd = "gnuplot '" + (dir / "sim.gnuplot").string() + "'";
  if (std::system(cmd.c_str()) != 0) {
    return Unavailable("sim: gnuplot failed (apt-get install gnuplot-nox), CSVs are in " + f.out);
  }
  return Status::Ok();
}

// The payload ratios of one RL-like step as the real encoder makes them: a Llama-shaped bf16
// checkpoint of kProbeBytes (synth model) and its first Adam step (synth steps; about 1-2% of the
// elements change, docs/synth.md), both cut into kProbeChunk chunks and encoded as the publisher
// encodes a delta version (codec::EncodeVersion, default options). Each changed chunk gives its
// payload size over its chunk size; the simulator scales these to its own chunks.
struct EncoderProbe {
  std::vector<double> ratios;  // changed chunks, in chunk order
  uint64_t bytes = 0, chunk_bytes = 0, chunks = 0, payload_bytes = 0;
  double changed_elements = 0;  // fraction of the step's updated elements that changed
  double seconds = 0;
};

constexpr uint64_t kProbeBytes = 256ull << 20;
constexpr uint64_t kProbeChunk = 8ull << 20;

Result<EncoderProbe> ProbeEncoder(uint64_t seed) {
  namespace fs = std::filesystem;
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  const fs::path dir =
      fs::temp_directory_path(ec) /
      ("weightcast-sim-probe-" + std::to_string(::getpid()) + "-" + std::to_string(seed));
  if (ec) return IoError("sim: no temporary directory: " + ec.message());
  fs::remove_all(dir, ec);
  // Removed however this returns.
  std::unique_ptr<const fs::path, void (*)(const fs::path*)> cleanup(&dir, [](const fs::path* d) {
    std::error_code ignored;
    fs::remove_all(*d, ignored);
  });
  synth::SynthModelOptions model;
  model.out_dir = dir / "base";
  model.target_bytes = kProbeBytes;
  model.seed = seed;
  WC_ASSIGN_OR_RETURN(synth::SynthModelSummary summary, synth::WriteSynthModel(model));
  (void)summary;
  synth::SynthStepsOptions steps;  // one step, the default Adam settings
  steps.from = dir / "base";
  steps.out_dir = dir / "steps";
  steps.seed = seed;
  WC_ASSIGN_OR_RETURN(std::vector<synth::StepStats> stats, synth::WriteSynthSteps(steps));
  WC_ASSIGN_OR_RETURN(Checkpoint base_ckpt, OpenCheckpoint(dir / "base"));
  WC_ASSIGN_OR_RETURN(Checkpoint step_ckpt, OpenCheckpoint(stats.at(0).dir));
  BuildOptions build;
  build.chunk_size = kProbeChunk;
  WC_ASSIGN_OR_RETURN(Manifest base, BuildManifest(base_ckpt, "probe", Version(1), build));
  WC_ASSIGN_OR_RETURN(Manifest step, BuildManifest(step_ckpt, "probe", Version(2), build));
  WC_ASSIGN_OR_RETURN(
      codec::SnapshotReader base_bytes,
      codec::SnapshotReader::Open(base_ckpt.root, base, codec::ReadPattern::kWhole));
  WC_ASSIGN_OR_RETURN(
      codec::SnapshotReader step_bytes,
      codec::SnapshotReader::Open(step_ckpt.root, step, codec::ReadPattern::kWhole));
  auto ignore_payload = [](ChunkIndex, std::span<const uint8_t>) { return Status::Ok(); };
  WC_ASSIGN_OR_RETURN(DeltaInfo delta,
                      codec::EncodeVersion(base, base_bytes, step, step_bytes, ignore_payload));
  EncoderProbe probe;
  probe.bytes = step.total_size();
  probe.chunk_bytes = step.chunk_size;
  probe.chunks = step.chunk_count();
  probe.changed_elements = stats[0].changed_fraction();
  for (uint32_t i = 0; i < step.chunk_count(); ++i) {
    const DeltaChunk& d = delta.chunks[i];
    if (d.encoding == ChunkEncoding::kSame) continue;
    probe.payload_bytes += d.payload_size;
    probe.ratios.push_back(double(d.payload_size) / double(step.ChunkRange(ChunkIndex(i)).size));
  }
  if (probe.ratios.empty()) return Internal("sim: the encoder probe's step changed no chunk");
  probe.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return probe;
}

Status RunSim(const SimFlags& f) {
  sim::FleetConfig c;
  c.receivers = f.nodes;
  WC_ASSIGN_OR_RETURN(c.total_bytes, ParseSize(f.size));
  if (f.chunk == "auto") {
    c.chunk_bytes = ChooseChunkSize(c.total_bytes);
  } else {
    WC_ASSIGN_OR_RETURN(c.chunk_bytes, ParseSize(f.chunk));
  }
  if (f.gbps <= 0) return InvalidArgument("--gbps must be positive");
  c.bandwidth = f.gbps * 1e9 / 8;
  if (f.origin_gbps < 0) return InvalidArgument("--origin-gbps must be >= 0");
  if (f.origin_fetchers == 0) return InvalidArgument("--origin-fetchers must be at least 1");
  c.origin_bandwidth = f.origin_gbps * 1e9 / 8;
  c.origin_fetchers = f.origin_fetchers;
  c.shared = f.shared;
  c.latency = f.latency_us * 1e-6;
  c.rack_size = f.rack_size;
  c.oversubscription = f.oversubscription;
  c.die_fraction = f.die;
  c.die_at = f.die_at;
  c.straggler_fraction = f.stragglers;
  c.straggler_speed = f.straggler_speed;
  c.late_fraction = f.late;
  c.late_at = f.late_at;
  c.source_leaves_at = f.source_leaves_at;
  c.tuning = f.tuning;
  WC_ASSIGN_OR_RETURN(const std::chrono::nanoseconds request_timeout, ParseDuration(f.timeout));
  if (request_timeout.count() <= 0) return InvalidArgument("--timeout must be positive");
  c.tuning.request_timeout = request_timeout;
  c.rebalance_interval = f.rebalance_ms * 1e-3;
  c.seed = f.seed;
  if (f.threads > 2) {
    return InvalidArgument("--threads must be 0 (two on a machine with two cores or more), 1 or 2");
  }
  c.threads = f.threads;
  if (f.bad < 0 || f.bad >= 1) return InvalidArgument("--bad must be in [0, 1)");
  if (f.die + f.stragglers + f.late + f.bad > 1) {
    return InvalidArgument("--die + --stragglers + --late + --bad must not exceed 1");
  }
  c.bad_fraction = f.bad;
  std::optional<EncoderProbe> probe;
  if (f.delta) {
    if (!(f.changed > 0 && f.changed <= 1)) return InvalidArgument("--changed must be in (0, 1]");
    std::vector<double> ratios;
    if (f.delta_ratio == "encoder") {
      WC_ASSIGN_OR_RETURN(EncoderProbe p, ProbeEncoder(f.seed));
      ratios = p.ratios;
      probe = std::move(p);
    } else {
      char* end = nullptr;
      const double r = std::strtod(f.delta_ratio.c_str(), &end);
      if (end == f.delta_ratio.c_str() || *end != '\0' || !(r > 0 && r <= 1)) {
        return InvalidArgument("--delta-ratio must be a number in (0, 1] or 'encoder', not '" +
                               f.delta_ratio + "'");
      }
      ratios.push_back(r);
    }
    WC_ASSIGN_OR_RETURN(c.payload_bytes, sim::DeltaPayloadSizes(c.total_bytes, c.chunk_bytes,
                                                                f.changed, ratios, f.seed));
  } else if (f.changed != 1.0 || f.delta_ratio != "encoder") {
    return InvalidArgument("--changed and --delta-ratio need --delta");
  }
  // Rollout settings, checked before the long part.
  std::vector<sim::RolloutConfig> rollout_configs;
  if (!f.commit_policies.empty() && f.commit_policies != "none") {
    sim::RolloutConfig rc;
    WC_ASSIGN_OR_RETURN(const auto deadline, ParseDuration(f.prepare_deadline));
    WC_ASSIGN_OR_RETURN(const auto interval, ParseDuration(f.heartbeat));
    WC_ASSIGN_OR_RETURN(const auto timeout, ParseDuration(f.heartbeat_timeout));
    rc.prepare_deadline = std::chrono::duration<double>(deadline).count();
    rc.heartbeat_interval = std::chrono::duration<double>(interval).count();
    rc.heartbeat_timeout = std::chrono::duration<double>(timeout).count();
    if (rc.prepare_deadline <= 0 || rc.heartbeat_interval <= 0 || rc.heartbeat_timeout <= 0) {
      return InvalidArgument("--prepare-deadline, --heartbeat and --heartbeat-timeout must be > 0");
    }
    if (f.control_latency_us < 0 || f.persist_ms < 0 || f.commit_ms < 0) {
      return InvalidArgument("--control-latency-us, --persist-ms and --commit-ms must be >= 0");
    }
    rc.latency = f.control_latency_us * 1e-6;
    rc.persist_delay = f.persist_ms * 1e-3;
    rc.commit_delay = f.commit_ms * 1e-3;
    rc.seed = f.seed;
    std::vector<sim::RolloutConfig> channels;
    for (std::string_view rest = f.control; !rest.empty();) {
      const size_t comma = rest.find(',');
      const std::string_view item = rest.substr(0, comma);
      sim::RolloutConfig one = rc;
      one.long_poll = item == "long-poll";
      one.push = item != "periodic";
      if (item != "long-poll" && item != "push" && item != "periodic") {
        return InvalidArgument("--control: '" + std::string(item) +
                               "' is not long-poll, push or periodic");
      }
      channels.push_back(one);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    for (const sim::RolloutConfig& channel : channels) {
      std::string_view rest = f.commit_policies;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        // POLICY or POLICY@DEADLINE (this policy's own --prepare-deadline).
        std::string_view item = rest.substr(0, comma);
        sim::RolloutConfig one = channel;
        if (const size_t at = item.find('@'); at != std::string_view::npos) {
          WC_ASSIGN_OR_RETURN(const auto own, ParseDuration(item.substr(at + 1)));
          one.prepare_deadline = std::chrono::duration<double>(own).count();
          if (one.prepare_deadline <= 0) {
            return InvalidArgument("--commit-policy: deadline must be > 0 in '" +
                                   std::string(item) + "'");
          }
          item = item.substr(0, at);
        }
        WC_ASSIGN_OR_RETURN(one.policy, rollout::ParseCommitPolicy(item));
        rollout_configs.push_back(one);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  WC_ASSIGN_OR_RETURN(sim::FleetResult r, sim::RunFleet(c));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<double> all, healthy;
  uint32_t incomplete = 0, incomplete_healthy = 0, healthy_nodes = 0;
  uint32_t bad_nodes = 0, bad_completed = 0, bad_banned = 0;
  for (const sim::NodeResult& n : r.nodes) {
    if (n.node != 0 && n.role == sim::NodeRole::kHealthy) ++healthy_nodes;
    if (n.node != 0 && n.role == sim::NodeRole::kBad) {
      // Not awaited: its neighbours ban it, and one banned by all of them cannot finish.
      ++bad_nodes;
      bad_completed += n.completed_at >= 0 ? 1 : 0;
      bad_banned += n.banned_by > 0 ? 1 : 0;
      continue;
    }
    if (n.node == 0 || n.role == sim::NodeRole::kDies) continue;
    if (n.completed_at < 0) {
      ++incomplete;
      if (n.role == sim::NodeRole::kHealthy) ++incomplete_healthy;
      continue;
    }
    all.push_back(n.completed_at);
    if (n.role == sim::NodeRole::kHealthy) healthy.push_back(n.completed_at);
  }
  const double s = double(c.total_bytes);
  const double p = r.wanted_bytes;  // S, or a delta step's payload total P
  const double p50 = Quantile(all, 0.5), p99 = Quantile(all, 0.99), mx = Quantile(all, 1.0);
  const double healthy_max = Quantile(healthy, 1.0);

  // The reference schedules move what every receiver must take in: S in chunks of c, or for a
  // delta step P in items of the mean payload (the same schedules, on the step's bytes).
  sim::ReferenceSetup ref{f.nodes, c.total_bytes, c.chunk_bytes, c.bandwidth, c.shared, c.latency};
  if (f.delta) {
    ref.total_bytes = static_cast<uint64_t>(p);
    ref.chunk_bytes =
        std::max<uint64_t>(1, ref.total_bytes / std::max<uint64_t>(r.changed_chunks, 1));
  }
  nlohmann::ordered_json refs;
  double ref_wall = 0;
  auto run_references = [&] {
    const auto t1 = std::chrono::steady_clock::now();
    refs["source_to_all_formula_s"] = sim::SourceToAllFormula(ref);
    refs["chain_formula_s"] = sim::ChainFormula(ref);
    refs["binomial_formula_s"] = sim::BinomialFormula(ref);
    if (f.references) {
      refs["source_to_all_sim_s"] = sim::SimulateSourceToAll(ref);
      refs["chain_sim_s"] = sim::SimulateChain(ref);
      uint32_t rounds = 0;
      refs["binomial_sim_s"] = sim::SimulateBinomial(ref, &rounds);
      refs["binomial_sim_nodes"] = uint64_t{1}
                                   << static_cast<int>(std::ceil(std::log2(f.nodes + 1.0)));
    }
    ref_wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  };
  // The control plane after the distribution, once per commit policy, on the same fleet result.
  // The references and the rollouts are separate simulations sharing nothing, so with a second
  // thread they run side by side: it takes the references, then rollouts from the same queue
  // (a few seconds of a 1,000-node run's wall time). The jthread joins on every return path.
  const std::vector<sim::RolloutNode> rnodes = sim::RolloutNodes(r);
  std::vector<std::optional<Result<sim::RolloutResult>>> rollout_results(rollout_configs.size());
  std::atomic<size_t> next_rollout{0};
  auto run_rollouts = [&] {
    for (size_t i = next_rollout++; i < rollout_configs.size(); i = next_rollout++) {
      rollout_results[i].emplace(sim::SimulateRollout(rollout_configs[i], rnodes));
    }
  };
  const bool side_by_side =
      c.threads == 0 ? std::thread::hardware_concurrency() >= 2 : c.threads >= 2;
  {
    std::jthread side;
    if (side_by_side) {
      side = std::jthread([&] {
        run_references();
        run_rollouts();
      });
    } else {
      run_references();
    }
    run_rollouts();
  }

  nlohmann::ordered_json rollouts = nlohmann::ordered_json::array();
  std::vector<std::string> rollout_lines;
  for (size_t i = 0; i < rollout_configs.size(); ++i) {
    const sim::RolloutConfig& rc = rollout_configs[i];
    WC_ASSIGN_OR_RETURN(sim::RolloutResult ro, std::move(*rollout_results[i]));
    const std::string policy = rollout::FormatCommitPolicy(rc.policy);
    auto lag = [](double to, double from) {
      return to >= 0 && from >= 0 ? nlohmann::ordered_json(to - from) : nlohmann::ordered_json();
    };
    auto at = [](double v) {
      return v >= 0 ? nlohmann::ordered_json(v) : nlohmann::ordered_json();
    };
    nlohmann::ordered_json jr;
    jr["policy"] = policy;
    jr["control"] = rc.long_poll ? "long-poll" : rc.push ? "push" : "periodic";
    jr["prepare_deadline_s"] = rc.prepare_deadline;
    jr["decision"] = rollout::DecisionName(ro.decision);
    jr["reason"] = ro.reason;
    jr["decided_at_s"] = at(ro.decided_at);
    jr["members_at_decision"] = ro.members_at_decision;
    jr["prepared_at_decision"] = ro.prepared_at_decision;
    jr["marked_dead"] = ro.marked_dead;
    jr["last_prepared_at_s"] = at(ro.last_prepared_at);
    jr["healthy_committed_at_s"] = at(ro.healthy_committed_at);
    jr["all_committed_at_s"] = at(ro.all_committed_at);
    jr["decided_nodes_committed_at_s"] = at(ro.decided_nodes_committed_at);
    // The figure of docs/simulator.md: last healthy node complete -> every healthy node committed.
    jr["healthy_commit_lag_s"] = lag(ro.healthy_committed_at, healthy_max);
    jr["committed"] = ro.committed;
    jr["heartbeats"] = ro.heartbeats;
    rollouts.push_back(jr);
    std::string line = "rollout " + policy + " (deadline " + Fixed(rc.prepare_deadline, 0) +
                       " s, " +
                       (rc.long_poll ? "long-poll"
                        : rc.push    ? "push"
                                     : "periodic") +
                       "): " + std::string(rollout::DecisionName(ro.decision));
    if (ro.decided_at >= 0) line += " at " + Fixed(ro.decided_at, 3) + " s";
    line += " (" + ro.reason + ")";
    if (ro.healthy_committed_at >= 0) {
      line += "; every healthy node committed at " + Fixed(ro.healthy_committed_at, 3) + " s, " +
              Fixed(ro.healthy_committed_at - healthy_max, 3) + " s after the last one completed";
    }
    if (ro.all_committed_at >= 0) {
      line += "; every live node at " + Fixed(ro.all_committed_at, 3) + " s";
    }
    line += "; " + std::to_string(ro.committed) + " committed, " + std::to_string(ro.marked_dead) +
            " marked dead";
    rollout_lines.push_back(std::move(line));
  }

  std::cout << "sim: " << f.nodes << " receivers, " << FormatBytes(c.total_bytes) << " in "
            << r.chunks << " chunks of " << FormatBytes(c.chunk_bytes) << ", " << f.gbps
            << " Gbit/s " << (c.shared ? "shared" : "full duplex")
            << (c.rack_size ? ", racks of " + std::to_string(c.rack_size) + " at " +
                                  Fixed(c.oversubscription) + ":1"
                            : "")
            << "\n";
  // A delta step's times are milliseconds to seconds: more digits.
  const int digits = r.lower_bound < 10 ? 3 : 1;
  std::cout << "lower bound " << Fixed(r.lower_bound, digits) << " s; completion p50 "
            << Fixed(p50, digits) << " s, p99 " << Fixed(p99, digits) << " s, max "
            << Fixed(mx, digits) << " s (x" << Fixed(mx / r.lower_bound, 3) << "); healthy max "
            << Fixed(healthy_max, digits) << " s (x" << Fixed(healthy_max / r.lower_bound, 3)
            << ")\n";
  std::cout << "source sent " << FormatBytes(static_cast<uint64_t>(r.source_bytes)) << " ("
            << Fixed(r.source_bytes / s, 3) << " x S, S by " << Fixed(r.source_first_round_done)
            << " s); " << incomplete << " receivers incomplete; " << r.timeouts << " timeouts; "
            << Fixed(r.duplicate_bytes / s, 3) << " x S duplicate bytes; " << r.events
            << " events in " << Fixed(wall, 2) << " s\n";
  if (c.origin_bandwidth > 0) {
    std::cout << "origin sent " << FormatBytes(static_cast<uint64_t>(r.origin_bytes)) << " ("
              << Fixed(r.origin_bytes / s, 3) << " x S)\n";
  }
  if (f.delta) {
    std::cout << "delta step: " << r.changed_chunks << " of " << r.chunks
              << " chunks changed, payloads P = " << FormatBytes(static_cast<uint64_t>(p)) << " ("
              << Fixed(p / s, 4) << " x S); P/B = " << Fixed(p / c.bandwidth, 3) << " s";
    if (probe) {
      std::cout << "; encoder ratios from a " << FormatBytes(probe->bytes) << " step in "
                << probe->chunks << " chunks of " << FormatBytes(probe->chunk_bytes) << " ("
                << Fixed(100 * probe->changed_elements, 2) << "% of elements changed, payloads "
                << Fixed(double(probe->payload_bytes) / double(probe->bytes), 4) << " x its size)";
    }
    std::cout << "\n";
  }
  if (bad_nodes > 0) {
    std::cout << "bad peers: " << bad_nodes << " (" << bad_banned << " banned, " << bad_completed
              << " completed); " << r.bad_arrivals << " corrupt items checked, " << r.bans
              << " bans, " << r.corrupt_accepted << " accepted\n";
  }
  std::cout << "references: " << refs.dump() << "\n";
  for (const std::string& line : rollout_lines) std::cout << line << "\n";
  if (!f.out.empty()) WC_RETURN_IF_ERROR(WriteOutputs(f, r));

  nlohmann::ordered_json j;
  j["bench"] = "sim";
  j["receivers"] = f.nodes;
  j["bytes"] = c.total_bytes;
  j["chunk_bytes"] = c.chunk_bytes;
  j["gbps"] = f.gbps;
  j["mode"] = c.shared ? "shared" : "full_duplex";
  j["rack_size"] = c.rack_size;
  j["oversubscription"] = c.oversubscription;
  j["die"] = f.die;
  j["stragglers"] = f.stragglers;
  j["late"] = f.late;
  j["bad"] = f.bad;
  j["tuning"] = {{"degree", c.tuning.degree},
                 {"source_degree", c.tuning.SourceDegree()},
                 {"window", c.tuning.window_per_peer},
                 {"max_window", c.tuning.max_window_per_peer},
                 {"adaptive_window", c.tuning.adaptive_window},
                 {"outstanding", c.tuning.max_outstanding},
                 {"slots", c.tuning.upload_slots},
                 {"source_slots", c.tuning.source_upload_slots},
                 {"slot_per_peer", c.tuning.slot_per_peer}};
  if (f.delta) {
    nlohmann::ordered_json d;
    d["changed"] = f.changed;
    d["delta_ratio"] = f.delta_ratio;
    d["changed_chunks"] = r.changed_chunks;
    d["payload_bytes"] = p;  // P
    d["payload_over_s"] = p / s;
    d["p_over_b_s"] = p / c.bandwidth;
    d["source_bytes_over_p"] = r.source_bytes / p;
    if (probe) {
      d["encoder"] = {{"bytes", probe->bytes},
                      {"chunk_bytes", probe->chunk_bytes},
                      {"chunks", probe->chunks},
                      {"changed_chunks", probe->ratios.size()},
                      {"changed_elements", probe->changed_elements},
                      {"payload_bytes", probe->payload_bytes},
                      {"payload_over_size", double(probe->payload_bytes) / double(probe->bytes)},
                      {"probe_wall_s", probe->seconds}};
    }
    j["delta"] = d;
  }
  j["healthy_nodes"] = healthy_nodes;
  j["healthy_completed"] = healthy.size();
  j["healthy_completion_ratio"] = healthy_nodes > 0 ? double(healthy.size()) / healthy_nodes : 1.0;
  if (bad_nodes > 0 || f.bad > 0) {
    j["bad_peers"] = {{"nodes", bad_nodes},
                      {"banned", bad_banned},
                      {"completed", bad_completed},
                      {"bad_arrivals", r.bad_arrivals},
                      {"bans", r.bans},
                      {"corrupt_accepted", r.corrupt_accepted}};
  }
  j["lower_bound_s"] = r.lower_bound;
  j["p50_s"] = p50;
  j["p99_s"] = p99;
  j["max_s"] = mx;
  j["healthy_max_s"] = healthy_max;
  j["ratio_max_to_bound"] = mx / r.lower_bound;
  j["ratio_healthy_max_to_bound"] = healthy_max / r.lower_bound;
  j["ratio_p50_to_bound"] = p50 / r.lower_bound;
  j["incomplete"] = incomplete;
  j["incomplete_healthy"] = incomplete_healthy;
  j["source_bytes"] = r.source_bytes;
  j["source_bytes_over_s"] = r.source_bytes / s;
  j["origin_gbps"] = f.origin_gbps;
  j["origin_bytes_over_s"] = r.origin_bytes / s;
  j["source_sent_s_by"] = r.source_first_round_done;
  j["duplicate_bytes"] = r.duplicate_bytes;
  j["aborted_bytes"] = r.aborted_bytes;
  j["timeouts"] = r.timeouts;
  j["requests"] = r.requests;
  j["rejects"] = r.rejects;  // requests refused (a full serve queue, a source holding repeats)
  j["peer_graph"] = {{"membership_events", r.membership_events},
                     {"edges_added", r.edges_added},
                     {"edges_dropped", r.edges_dropped},
                     {"edges_detached", r.edges_detached},
                     {"max_dropped_per_event", r.max_dropped_per_event}};
  j["references"] = refs;
  j["rollout"] = rollouts;
  j["events"] = r.events;
  j["wall_s"] = wall;
  j["reference_wall_s"] = ref_wall;
  std::cout << j.dump() << "\n";
  if (incomplete_healthy > 0) {
    return Unavailable(std::to_string(incomplete_healthy) + " healthy receivers did not complete");
  }
  return Status::Ok();
}

void SetupSim(CLI::App& app) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand(
      "sim", "Simulate a broadcast to a modelled fleet with the real swarm scheduler");
  cmd->add_option("-n,--nodes", f->nodes, "Receivers (the source is extra)")->capture_default_str();
  cmd->add_option("--size", f->size, "Snapshot bytes S, e.g. 500GB")->capture_default_str();
  cmd->add_option(
         "--chunk", f->chunk,
         "Chunk size c in the simulation; auto: what `weightcast publish` picks for --size")
      ->capture_default_str();
  cmd->add_option("--gbps", f->gbps, "Per-node bandwidth B, Gbit/s")->capture_default_str();
  cmd->add_option("--origin-gbps", f->origin_gbps,
                  "An HTTP(S) origin holding the version, its aggregate upload in Gbit/s (0: "
                  "none); receivers granted shares fetch them there (docs/origin.md)")
      ->capture_default_str();
  cmd->add_option("--origin-fetchers", f->origin_fetchers,
                  "Receivers granted a share of the origin (coordinator --origin-fetchers)")
      ->capture_default_str();
  cmd->add_flag("--shared", f->shared, "One capacity shared by upload and download");
  cmd->add_option("--latency-us", f->latency_us, "One-way link latency")->capture_default_str();
  cmd->add_option("--rack-size", f->rack_size, "Nodes per rack (0: no racks)");
  cmd->add_option("--oversubscription", f->oversubscription,
                  "Rack uplink oversubscription, e.g. 4");
  cmd->add_option("--die", f->die, "Fraction of receivers that die");
  cmd->add_option("--die-at", f->die_at, "When they die, as a fraction of the lower bound");
  cmd->add_option("--stragglers", f->stragglers, "Fraction of receivers that are slow");
  cmd->add_option("--straggler-speed", f->straggler_speed, "Their speed as a fraction of B");
  cmd->add_option("--late", f->late, "Fraction of receivers that join late");
  cmd->add_option("--late-at", f->late_at, "When they join, as a fraction of the lower bound");
  cmd->add_option("--source-leaves-at", f->source_leaves_at, "Seconds; the source leaves then");
  cmd->add_option("--bad", f->bad,
                  "Fraction of receivers whose every upload fails its check (their neighbours "
                  "ban them)");
  cmd->add_flag("--delta", f->delta,
                "Simulate a delta step: every receiver holds the base and fetches the changed "
                "chunks' payloads (the bound is P/B, P the payload total)");
  cmd->add_option("--delta-ratio", f->delta_ratio,
                  "With --delta: each changed chunk's payload over its size, R in (0, 1], or "
                  "'encoder': the ratios the real codec gives on a synthetic RL step")
      ->capture_default_str();
  cmd->add_option("--changed", f->changed, "With --delta: the fraction of chunks that changed")
      ->capture_default_str();
  // Defaults shown are an agent's (swarm/tuning.h): with no scheduler flag the simulation runs
  // exactly what the agents run.
  cmd->add_option("--degree", f->tuning.degree, "Peers per node")->capture_default_str();
  cmd->add_option("--source-degree", f->tuning.source_degree,
                  "Peers of the source (at least --degree)")
      ->capture_default_str();
  cmd->add_option("--source-slots", f->tuning.source_upload_slots,
                  "Concurrent uploads of the source (0: --slots)")
      ->capture_default_str();
  cmd->add_option("--window", f->tuning.window_per_peer, "Requests in flight per peer")
      ->capture_default_str();
  cmd->add_option("--outstanding", f->tuning.max_outstanding, "Requests in flight per node")
      ->capture_default_str();
  cmd->add_flag("--adaptive-window,!--no-adaptive-window", f->tuning.adaptive_window,
                "Per-peer windows follow each peer's measured speed (up to --max-window); on "
                "by default, as in the agents")
      ->capture_default_str();
  cmd->add_option("--max-window", f->tuning.max_window_per_peer, "Largest adaptive window per peer")
      ->capture_default_str();
  cmd->add_option("--endgame", f->tuning.endgame_max_requests,
                  "Peers a chunk may be asked of at the end")
      ->capture_default_str();
  cmd->add_option("--slots", f->tuning.upload_slots, "Concurrent uploads per node")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout, "Request timeout (e.g. 4s, 500ms)")
      ->capture_default_str();
  cmd->add_option("--rebalance-ms", f->rebalance_ms, "Max-min rate recomputation interval")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "Seed")->capture_default_str();
  cmd->add_option("--threads", f->threads,
                  "Threads: 1, or 2 (a second one takes half of each HAVE fan-out; the same run "
                  "event for event); default 0: 2 on a machine with two cores or more")
      ->capture_default_str();
  cmd->add_option("-o,--out", f->out, "Directory for completion.csv, progress.csv (and sim.png)");
  cmd->add_flag("--plot", f->plot, "Draw sim.png with gnuplot (needs --out)");
  cmd->add_flag("!--no-references", f->references, "Skip simulating the reference schedules");
  cmd->add_option("--commit-policy", f->commit_policies,
                  "Rollout after the distribution, once per comma-separated policy "
                  "(all, quorum:F, each; POLICY@DURATION: with its own prepare deadline; none: "
                  "no rollout)")
      ->capture_default_str();
  cmd->add_option("--prepare-deadline", f->prepare_deadline,
                  "The coordinator aborts a version not committed this long after publication")
      ->capture_default_str();
  cmd->add_option("--heartbeat", f->heartbeat, "Agent heartbeat interval")->capture_default_str();
  cmd->add_option("--heartbeat-timeout", f->heartbeat_timeout,
                  "Silence after which the coordinator marks a node dead")
      ->capture_default_str();
  cmd->add_option("--control-latency-us", f->control_latency_us,
                  "One-way agent-coordinator latency")
      ->capture_default_str();
  cmd->add_option("--control", f->control,
                  "Control channels to run each policy over, comma-separated: long-poll (one "
                  "heartbeat held at the coordinator, answered on a change: the agent's), push "
                  "(periodic heartbeats, one at once on progress), periodic")
      ->capture_default_str();
  cmd->add_option("--persist-ms", f->persist_ms, "Coordinator's durable write of a decision")
      ->capture_default_str();
  cmd->add_option("--commit-ms", f->commit_ms, "Agent's store commit (switch of current)")
      ->capture_default_str();
  cmd->callback([f] { Finish("sim", RunSim(*f)); });
}

const CommandRegistration kRegistered{"sim", 60, &SetupSim};

}  // namespace
}  // namespace weightcast::cli
