#include "cli/status_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "metrics/log.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace wire = coord::wire;

const wire::ChannelProgress* FindProgress(const wire::NodeStatus& node, std::string_view channel) {
  for (const wire::ChannelProgress& p : node.channels()) {
    if (p.channel() == channel) return &p;
  }
  return nullptr;
}

std::string Percent(uint64_t done, uint64_t total) {
  if (total == 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%",
                100.0 * static_cast<double>(std::min(done, total)) / static_cast<double>(total));
  return buf;
}

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

std::string FormatAgo(uint64_t ms) {
  char buf[32];
  if (ms < 10'000) {
    std::snprintf(buf, sizeof(buf), "%.1fs ago", static_cast<double>(ms) / 1000);
  } else {
    return FormatEta(static_cast<double>(ms) / 1000) + " ago";
  }
  return buf;
}

// Network-supplied text (host names, racks, errors) must not drive the terminal.
std::string Safe(std::string_view text) { return EscapeControlBytes(text); }

// A table drawn with columns padded to their widest cell.
class Table {
 public:
  explicit Table(std::vector<std::string> header) { rows_.push_back(std::move(header)); }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const {
    std::vector<size_t> widths;
    for (const auto& row : rows_) {
      widths.resize(std::max(widths.size(), row.size()));
      for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line;
      for (size_t i = 0; i < row.size(); ++i) {
        line += row[i];
        if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
      }
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

// Summary of one channel without rates.
ChannelSummary SummarizeChannel(const wire::FleetStatus& status, const wire::ChannelLog& log) {
  ChannelSummary s;
  s.channel = log.channel();
  s.current_version = log.current_version();
  if (!log.versions().empty()) {
    s.entry = log.versions(log.versions_size() - 1);
    s.version = s.entry.version();
  }
  const uint64_t v = s.version;
  for (const wire::NodeStatus& node : status.nodes()) {
    const wire::ChannelProgress* p = FindProgress(node, log.channel());
    if (p == nullptr) continue;
    if (v != 0 && p->version() == v) {
      s.bytes_received += p->bytes_received();
      s.bytes_sent += p->bytes_sent();
    }
    if (node.source()) continue;
    if (!node.alive()) {
      ++s.dead;
      continue;
    }
    ++s.followers;
    if (v == 0) continue;
    // What this node wants of v: its own figures once it reported on v (a tensor subset wants
    // fewer chunks), else the whole version.
    const bool on_v = p->version() == v && p->bytes_total() > 0;
    const uint64_t want_bytes = on_v ? p->bytes_total() : s.entry.total_bytes();
    const uint64_t want_chunks = on_v ? p->chunks_total() : s.entry.chunk_count();
    s.bytes_total += want_bytes;
    s.chunks_total += want_chunks;
    const bool committed =
        p->current_version() >= v || (p->version() == v && p->phase() == wire::PHASE_COMMITTED);
    if (committed) {
      ++s.committed;
    } else if (p->version() == v && p->phase() == wire::PHASE_PREPARED) {
      ++s.prepared;
      if (node.tensor_patterns_size() > 0) ++s.subset_prepared;
    }
    if (committed || (p->version() == v && p->phase() == wire::PHASE_PREPARED)) {
      s.bytes_done += want_bytes;
      s.chunks_done += want_chunks;
    } else if (on_v) {
      if (p->phase() == wire::PHASE_FAILED) ++s.failed;
      s.bytes_done += std::min(p->bytes_done(), want_bytes);
      s.chunks_done += std::min<uint64_t>(p->chunks_done(), want_chunks);
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
    if (earlier != nullptr && s.version != 0 && now.now_unix_ms() > earlier->now_unix_ms()) {
      for (const wire::ChannelLog& before_log : earlier->channels()) {
        if (before_log.channel() != log.channel()) continue;
        ChannelSummary before = SummarizeChannel(*earlier, before_log);
        if (before.version != s.version) break;  // a new version: its rate starts from scratch
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
    if (s.version != 0 && s.followers > 0 && s.bytes_done >= s.bytes_total &&
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

std::string ProgressBar(double fraction, int width) {
  width = std::max(width, 1);
  if (!(fraction >= 0)) fraction = 0;  // NaN too
  fraction = std::min(fraction, 1.0);
  // Floor, so the bar looks full only when the work is.
  int filled = static_cast<int>(std::floor(fraction * width));
  if (fraction < 1.0) filled = std::min(filled, width - 1);
  std::string bar = "[";
  bar.append(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(width - filled), '.');
  bar += ']';
  return bar;
}

std::string FormatEta(std::optional<double> seconds) {
  if (!seconds || !std::isfinite(*seconds) || *seconds < 0 || *seconds > 100.0 * 86400) {
    return "-";
  }
  auto s = static_cast<uint64_t>(std::ceil(*seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llus", static_cast<unsigned long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  }
  return buf;
}

std::string FormatRate(std::optional<double> bytes_per_s) {
  if (!bytes_per_s || !std::isfinite(*bytes_per_s) || *bytes_per_s < 0) return "-";
  return FormatBytes(static_cast<uint64_t>(std::llround(*bytes_per_s))) + "/s";
}

std::string RenderSummaryLine(const ChannelSummary& s) {
  std::string line = Safe(s.channel);
  if (s.version == 0) return line + " no version published";
  line += " v" + std::to_string(s.version);
  line += " bytes " + Percent(s.bytes_done, s.bytes_total);
  line += " chunks " + std::to_string(s.chunks_done) + "/" + std::to_string(s.chunks_total);
  line += " nodes " + std::to_string(s.nodes_done()) + "/" + std::to_string(s.followers);
  if (s.dead > 0) line += " dead " + std::to_string(s.dead);
  if (s.failed > 0) line += " failed " + std::to_string(s.failed);
  line += " " + FormatRate(s.verified_bytes_per_s);
  line += " ETA " + FormatEta(s.eta_s);
  if (s.complete()) line += " complete";
  return line;
}

std::string RenderStatus(const wire::FleetStatus& now, const wire::FleetStatus* earlier,
                         const ViewOptions& options) {
  std::string out;
  size_t live = 0;
  for (const wire::NodeStatus& node : now.nodes()) live += node.alive() ? 1 : 0;
  out += "weightcast status  " +
         metrics::FormatTimestamp(
             std::chrono::system_clock::time_point(std::chrono::milliseconds(now.now_unix_ms()))) +
         "  nodes " + std::to_string(now.nodes_size()) + " (" + std::to_string(live) + " live, " +
         std::to_string(static_cast<size_t>(now.nodes_size()) - live) + " dead)\n";

  // Bars take what the labels leave of the width, within reason.
  const int bar = std::clamp(options.width - 60, 10, 40);
  std::vector<ChannelSummary> summaries = Summarize(now, earlier, options.channel);
  if (summaries.empty()) {
    out += options.channel.empty() ? "no channels yet\n"
                                   : "channel " + Safe(options.channel) + ": not known\n";
  }
  for (const ChannelSummary& s : summaries) {
    out += "\n" + Safe(s.channel);
    if (s.version == 0) {
      out += "  no version published yet\n";
      continue;
    }
    out += "  v" + std::to_string(s.version);
    if (s.entry.base_version() != 0) {
      out += " (delta of v" + std::to_string(s.entry.base_version()) + ", payload " +
             FormatBytes(s.entry.payload_bytes()) + ")";
    }
    out += ", " + FormatBytes(s.entry.total_bytes());
    if (s.current_version != 0 && s.current_version != s.version) {
      out += "  fleet current v" + std::to_string(s.current_version);
    }
    if (s.entry.decision() == wire::DECISION_ABORT) {
      out += "  ABORTED: " + Safe(s.entry.abort_reason());
    }
    if (s.complete()) out += "  complete";
    out += "\n";
    char pct[16];
    auto row = [&](std::string_view label, uint64_t done, uint64_t total, std::string detail) {
      std::snprintf(pct, sizeof(pct), "%6s", Percent(done, total).c_str());
      out += "  ";
      out += label;
      out.append(7 - label.size(), ' ');
      out += ProgressBar(Fraction(done, total), bar) + " " + pct + "  " + detail + "\n";
    };
    row("bytes", s.bytes_done, s.bytes_total,
        FormatBytes(s.bytes_done) + " / " + FormatBytes(s.bytes_total));
    row("chunks", s.chunks_done, s.chunks_total,
        std::to_string(s.chunks_done) + " / " + std::to_string(s.chunks_total));
    std::string nodes_detail =
        std::to_string(s.nodes_done()) + " / " + std::to_string(s.followers) + " done (" +
        std::to_string(s.committed) + " committed, " + std::to_string(s.prepared) + " prepared)";
    if (s.failed > 0) nodes_detail += ", " + std::to_string(s.failed) + " failed";
    if (s.dead > 0) nodes_detail += ", " + std::to_string(s.dead) + " dead";
    row("nodes", s.nodes_done(), s.followers, nodes_detail);
    out += "  rate   verified " + FormatRate(s.verified_bytes_per_s) + ", received " +
           FormatRate(s.received_bytes_per_s) + ", sent " + FormatBytes(s.bytes_sent) +
           " in all  ETA " + FormatEta(s.eta_s) + "\n";
  }

  // The fleet table: one row per node and channel it reports on (or one row with no channel).
  struct Row {
    int priority;  // 0 dead, 1 failed, 2 not done, 3 done: what to keep when rows are short
    bool source;
    uint64_t node_id;
    std::vector<std::string> cells;
  };
  std::map<std::string, uint64_t> newest;
  for (const ChannelSummary& s : summaries) newest[s.channel] = s.version;
  std::vector<Row> rows;
  std::vector<std::string> errors;
  for (const wire::NodeStatus& node : now.nodes()) {
    std::string name = std::to_string(node.node_id());
    if (!node.hostname().empty()) name += " " + Safe(node.hostname());
    if (node.source()) name += " (source)";
    auto base = [&](int priority) {
      Row r{priority, node.source(), node.node_id(), {}};
      r.cells = {name, node.rack().empty() ? "-" : Safe(node.rack()),
                 node.alive() ? "yes" : "DEAD"};
      return r;
    };
    bool any = false;
    for (const wire::ChannelProgress& p : node.channels()) {
      if (!options.channel.empty() && p.channel() != options.channel) continue;
      any = true;
      auto it = newest.find(p.channel());
      bool done = p.phase() == wire::PHASE_SEEDING ||
                  (it != newest.end() && it->second != 0 && p.current_version() >= it->second);
      int priority = !node.alive() ? 0 : p.phase() == wire::PHASE_FAILED ? 1 : !done ? 2 : 3;
      Row r = base(priority);
      std::string phase(PhaseName(p.phase()));
      if (p.phase() == wire::PHASE_FETCHING && p.delta()) phase += "/delta";
      uint64_t done_bytes = p.bytes_done(), total_bytes = p.bytes_total();
      if (p.phase() == wire::PHASE_COMMITTED || p.phase() == wire::PHASE_SEEDING) {
        done_bytes = total_bytes;
      }
      r.cells.insert(r.cells.end(),
                     {Safe(p.channel()), phase, p.version() ? std::to_string(p.version()) : "-",
                      p.current_version() ? std::to_string(p.current_version()) : "-",
                      Percent(done_bytes, total_bytes), FormatBytes(p.bytes_received()),
                      FormatBytes(p.bytes_sent()), FormatAgo(node.last_heartbeat_ms_ago())});
      rows.push_back(std::move(r));
      if (!p.error().empty()) {
        errors.push_back("node " + std::to_string(node.node_id()) + " " + Safe(p.channel()) + " v" +
                         std::to_string(p.version()) + ": " + Safe(p.error()));
      }
    }
    if (!any) {
      Row r = base(node.alive() ? 2 : 0);
      r.cells.insert(r.cells.end(),
                     {"-", "-", "-", "-", "-", "-", "-", FormatAgo(node.last_heartbeat_ms_ago())});
      rows.push_back(std::move(r));
    }
  }
  size_t hidden = 0;
  if (options.max_table_rows > 0 && rows.size() > options.max_table_rows) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const Row& a, const Row& b) { return a.priority < b.priority; });
    hidden = rows.size() - options.max_table_rows;
    rows.resize(options.max_table_rows);
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.source != b.source) return a.source;
    return a.node_id < b.node_id;
  });
  Table table({"NODE", "RACK", "ALIVE", "CHANNEL", "PHASE", "VERSION", "CURRENT", "DONE", "IN",
               "OUT", "HEARTBEAT"});
  for (Row& r : rows) table.Add(std::move(r.cells));
  out += "\n" + table.Render();
  if (hidden > 0) out += "... " + std::to_string(hidden) + " more rows (done ones first hidden)\n";
  for (const std::string& e : errors) out += "error: " + e + "\n";
  return out;
}

std::string TruncateColumns(std::string_view line, size_t columns) {
  size_t count = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    // A UTF-8 continuation byte belongs to the character before it.
    if ((static_cast<unsigned char>(line[i]) & 0xc0) == 0x80) continue;
    if (count == columns) return std::string(line.substr(0, i));
    ++count;
  }
  return std::string(line);
}

std::string TerminalRedraw::Next(std::string_view frame) {
  std::string out;
  if (previous_lines_ > 0) {
    // Cursor to the start of the line `previous_lines_` up, then erase to the end of the screen.
    out += "\x1b[" + std::to_string(previous_lines_) + "F\x1b[J";
  }
  previous_lines_ = 0;
  while (!frame.empty()) {
    size_t nl = frame.find('\n');
    std::string_view line = frame.substr(0, nl);
    out += width_ > 0 ? TruncateColumns(line, static_cast<size_t>(width_)) : std::string(line);
    out += '\n';
    ++previous_lines_;
    frame.remove_prefix(nl == std::string_view::npos ? frame.size() : nl + 1);
  }
  return out;
}

}  // namespace weightcast::cli
