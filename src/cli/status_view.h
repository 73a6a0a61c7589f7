// What `weightcast status` draws: a coordinator's FleetStatus turned into text. Pure functions of
// the snapshots (no I/O, no clock: times come from FleetStatus::now_unix_ms), so the drawing is
// unit-tested and the command only polls and prints.
//
// Per channel, for the version the fleet is heading for (the newest, or after a rollback or an
// aborted rollout the fleet's current one):
//   bytes   bytes verified by the live agents following the channel / what they want: model
//           bytes, or for an agent fetching a delta the payload bytes it receives
//   chunks  the same in chunks
//   nodes   live followers that have the version PREPARED or COMMITTED / live followers
//   rate    those bytes per second and wire bytes received per second, between an earlier
//           snapshot and this one; ETA = bytes left / verified rate
// then a fleet table: one row per node and channel, failed ones first with their errors, fitted
// to the width by shortening and then dropping the least needed columns. Nodes that left the
// fleet on purpose (NodeStatus.left) are hidden unless asked for. Above kSummaryAboveNodes nodes
// the table gives way to a summary (FleetSummary) unless every node is asked for.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "coord/coord.pb.h"

namespace weightcast::cli {

// Progress of one channel's newest version over its live followers (agents with a progress
// entry for the channel; publishers/sources are not followers).
struct ChannelSummary {
  std::string channel;
  uint64_t version = 0;             // newest published; 0: none yet
  uint64_t current_version = 0;     // the version the fleet should have current
  coord::wire::VersionEntry entry;  // the log entry of `version` (empty when none)
  // The version the counts below are about: `version`, unless it was aborted (rolled back past,
  // or its rollout failed) while the fleet has a current version: then current_version.
  uint64_t target = 0;
  coord::wire::VersionEntry target_entry;

  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  uint64_t chunks_done = 0;
  uint64_t chunks_total = 0;
  uint32_t followers = 0;  // live followers
  uint32_t dead = 0;       // followers the coordinator marks dead
  uint32_t prepared = 0;   // live followers with `version` PREPARED
  uint32_t committed = 0;  // live followers with `version` (or a later one) COMMITTED
  uint32_t failed = 0;     // live followers with `version` FAILED
  // Live followers that want only some tensors (NodeStatus::tensor_patterns) and have them
  // PREPARED: such an agent keeps a subset staged and never commits it, so it is done.
  uint32_t subset_prepared = 0;
  // Live followers whose bytes count delta payloads (fetching, or holding the base of, a delta
  // `target`) instead of model bytes.
  uint32_t delta_followers = 0;
  // Wire bytes for `target`, every node's: sources and nodes that left (NodeStatus.left) too.
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;

  // From the earlier snapshot; empty without one, or when it was about another version.
  std::optional<double> verified_bytes_per_s;
  std::optional<double> received_bytes_per_s;
  std::optional<double> eta_s;  // empty: unknown (no rate yet, or nothing moves)

  uint32_t nodes_done() const { return prepared + committed; }
  // Every live follower has `target` committed, or prepared when it wants a tensor subset (and
  // there is at least one follower).
  bool settled() const {
    return target != 0 && followers > 0 && committed + subset_prepared == followers;
  }
  // The newest version was committed and then rolled back past: the fleet's rollout of it is
  // over, and settling on the version rolled back to completes it.
  bool rolled_back() const {
    return entry.decision() == coord::wire::DECISION_ABORT && entry.committed_once();
  }
  // Settled on the newest version, or on the version a rollback made current
  // (`status --until-complete`).
  bool complete() const {
    return version != 0 && settled() &&
           (target == version || (rolled_back() && target == current_version));
  }
};

// Summaries of every channel in `now` (or only `channel` when not empty), in the order of
// now.channels(). `earlier` (may be null) is an older snapshot of the same coordinator for rates.
std::vector<ChannelSummary> Summarize(const coord::wire::FleetStatus& now,
                                      const coord::wire::FleetStatus* earlier,
                                      std::string_view channel = {});

// What a large fleet shows instead of one row per node: per channel, over the nodes following
// it (sources included; nodes that left are only counted), measured against the version the
// bars are about (ChannelSummary::target). The fleet page computes the same from the status JSON
// (docs/fleet_page.md, "The summary").
struct FleetSummary {
  struct Node {
    uint64_t node_id = 0;
    std::string hostname;
    std::string rack;
    std::string state;  // as in `states`
    double progress = 0;
  };
  struct Rack {
    std::string name;
    uint32_t agents = 0;
    uint32_t done = 0;    // live, not failed, with all of the version
    uint32_t failed = 0;  // live and FAILED
    uint32_t dead = 0;
    double progress_sum = 0;  // over its agents; the mean is progress_sum / agents
  };
  static constexpr size_t kBuckets = 11;  // ten of 10% below 100%, and 100%
  static constexpr size_t kLeastAdvanced = 10;

  std::string channel;
  uint32_t nodes = 0;  // following the channel, not left
  // Nodes by state: the phase (FETCHING, PREPARED, ...) of live ones, "dead", plus "lagging"
  // (live, not failed, under half the best node's progress, or committed on an older version than
  // the fleet's) and "left" (gone on purpose). In the order to print them.
  std::vector<std::pair<std::string, uint32_t>> states;
  // Live agents (not sources) by progress: [i] counts those in [10i%, 10(i+1)%), [10] those done.
  std::array<uint32_t, kBuckets> histogram{};
  // The live agents that are neither failed nor done, least progress first (then node id).
  std::vector<Node> least_advanced;
  std::vector<Rack> racks;  // agents (not sources) by rack, least mean progress first
};

std::vector<FleetSummary> SummarizeFleet(const coord::wire::FleetStatus& now,
                                         std::string_view channel = {});

// Fleets above this many nodes (listed ones: nodes that left count only with show_left) get the
// summary instead of the fleet table, unless ViewOptions::list_nodes.
inline constexpr size_t kSummaryAboveNodes = 32;

struct ViewOptions {
  std::string channel;     // empty: every channel
  int width = 100;         // columns available; every line fits (0: no limit)
  bool show_left = false;  // list nodes that left (NodeStatus.left) too
  // Rows of the fleet table to draw at most (0: all); the rest are counted in one line. Failed,
  // dead and unfinished nodes are drawn before done ones when rows are short. A summary
  // (FleetSummary) lists fewer least advanced nodes and racks to stay within as many lines.
  size_t max_table_rows = 0;
  // The fleet table of every node even above kSummaryAboveNodes (`status --nodes`).
  bool list_nodes = false;
};

// The whole view, lines ending in '\n', no escape sequences.
std::string RenderStatus(const coord::wire::FleetStatus& now,
                         const coord::wire::FleetStatus* earlier, const ViewOptions& options);

// One line per channel, for logs and pipes: "policy v4 bytes 50.0% chunks 64/128 nodes 2/8
// 25.0 MiB/s ETA 20s".
std::string RenderSummaryLine(const ChannelSummary& summary);

// The width to draw at: the terminal's (`tty_columns`, from TIOCGWINSZ; 0 when stdout is not a
// terminal), else $COLUMNS (`columns_env`, may be null) when it is a sane number, else 80.
int ResolveWidth(int tty_columns, const char* columns_env);

// "[#####.....]": exactly width+2 characters; fraction clamped to [0, 1]; full only at 1.
std::string ProgressBar(double fraction, int width);
// "45s", "3m05s", "2h01m"; "-" for an unknown or absurd ETA.
std::string FormatEta(std::optional<double> seconds);
// "12.5 MiB/s"; "-" when unknown.
std::string FormatRate(std::optional<double> bytes_per_s);

// Redraws a frame in place on a terminal: the prefix moves the cursor up over the previous frame
// and clears to the end of the screen, so the view does not scroll. Lines are cut to `width`
// columns (0: not cut): a line the terminal wraps would make the cursor count wrong.
class TerminalRedraw {
 public:
  explicit TerminalRedraw(int width = 0) : width_(width) {}
  // `frame` (lines ending in '\n') with the escape prefix that erases the previous one.
  std::string Next(std::string_view frame);

 private:
  int width_;
  size_t previous_lines_ = 0;
};

// `line` cut to at most `columns` characters (UTF-8 sequences count as one and are not split).
std::string TruncateColumns(std::string_view line, size_t columns);

}  // namespace weightcast::cli
