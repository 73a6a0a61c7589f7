// What `weightcast status` draws from the summaries (status_summary.cc): the summary lines, the
// fleet table fitted to the terminal, the large-fleet summary, and the redraw of a live view.
#include "cli/status_view.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <set>

#include "cli/status_parts.h"
#include "metrics/log.h"
#include "util/text.h"

namespace weightcast::cli {
namespace {

namespace wire = coord::wire;

using status_parts::FindEntry;
using status_parts::Fraction;
using status_parts::HasCurrent;
using status_parts::PhaseName;
using status_parts::SummarizeFleetChannel;

std::string Percent(uint64_t done, uint64_t total) {
  if (total == 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%",
                100.0 * static_cast<double>(std::min(done, total)) / static_cast<double>(total));
  return buf;
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

}  // namespace

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
  line += " v" + std::to_string(s.target);
  if (s.target != s.version) line += " (v" + std::to_string(s.version) + " aborted)";
  line += " bytes " + Percent(s.bytes_done, s.bytes_total);
  line += " chunks " + std::to_string(s.chunks_done) + "/" + std::to_string(s.chunks_total);
  line += " nodes " + std::to_string(s.nodes_done()) + "/" + std::to_string(s.followers);
  if (s.dead > 0) line += " dead " + std::to_string(s.dead);
  if (s.failed > 0) line += " failed " + std::to_string(s.failed);
  line += " " + FormatRate(s.verified_bytes_per_s);
  line += " ETA " + FormatEta(s.eta_s);
  if (s.target != s.version && s.settled()) {
    line += " settled";  // on the version a rollback made current
  } else if (s.complete()) {
    line += " complete";
  }
  return line;
}

int ResolveWidth(int tty_columns, const char* columns_env) {
  if (tty_columns > 0) return tty_columns;
  if (columns_env != nullptr) {
    char* end = nullptr;
    const long columns = std::strtol(columns_env, &end, 10);
    if (end != columns_env && *end == '\0' && columns >= 20 && columns <= 10'000) {
      return static_cast<int>(columns);
    }
  }
  return 80;
}

namespace {

// One fleet-table row and the note lines (errors) drawn under it.
struct Row {
  int priority;  // 0 failed, 1 dead, 2 not done, 3 done, 4 left: what to keep when rows are short
  bool failed;
  bool source;
  uint64_t node_id;
  std::vector<std::string> cells;
  std::vector<std::string> notes;
};

// The fleet table's columns, and how they give way to a narrow terminal.
enum Column {
  kNode,
  kRack,
  kAlive,
  kChannel,
  kPhase,
  kVersion,
  kCurrent,
  kDone,
  kIn,
  kOut,
  kHeartbeat,
  kColumns
};
constexpr std::array<std::string_view, kColumns> kHeaders = {
    "NODE",    "RACK", "ALIVE", "CHANNEL", "PHASE",    "VERSION",
    "CURRENT", "DONE", "IN",    "OUT",     "HEARTBEAT"};
constexpr std::array<std::string_view, kColumns> kShortHeaders = {
    "NODE", "RACK", "ALIVE", "CHAN", "PHASE", "VER", "CUR", "DONE", "IN", "OUT", "HEARTBEAT"};

// `cell` cut to `width` columns, '~' marking the cut.
std::string Fit(const std::string& cell, size_t width) {
  if (cell.size() <= width) return cell;
  if (width == 0) return "";
  return TruncateColumns(cell, width - 1) + "~";
}

// The table fitted to `width` (0: no limit): headers abbreviated, then columns shortened and
// dropped in order of need; what was dropped is said in the last line.
std::string RenderTable(const std::vector<Row>& rows, int width, bool one_channel) {
  std::array<size_t, kColumns> natural{};
  for (const Row& r : rows) {
    for (size_t c = 0; c < kColumns; ++c) natural[c] = std::max(natural[c], r.cells[c].size());
  }
  std::array<bool, kColumns> shown{};
  shown.fill(true);
  bool short_headers = false;
  std::array<size_t, kColumns> widths{};
  auto header = [&](size_t c) { return short_headers ? kShortHeaders[c] : kHeaders[c]; };
  std::array<size_t, kColumns> cap{};
  cap.fill(SIZE_MAX);
  auto total = [&] {
    size_t sum = 0, n = 0;
    for (size_t c = 0; c < kColumns; ++c) {
      if (!shown[c]) continue;
      widths[c] = std::max(std::min(natural[c], cap[c]), header(c).size());
      sum += widths[c];
      ++n;
    }
    return sum + (n > 0 ? 2 * (n - 1) : 0);
  };
  // In order, until the table fits: abbreviate, shorten long host names, drop what the channel
  // block above already says or what matters least while a rollout runs. NODE, ALIVE, PHASE and
  // DONE always stay.
  struct Step {
    enum { kAbbreviate, kCap, kDrop } what;
    Column column;
    size_t cap;
  };
  std::vector<Step> steps = {
      {Step::kAbbreviate, kNode, 0}, {Step::kDrop, kRack, 0}, {Step::kCap, kNode, 20}};
  if (one_channel) steps.push_back({Step::kDrop, kChannel, 0});
  for (Step step : std::initializer_list<Step>{{Step::kDrop, kIn, 0},
                                               {Step::kCap, kNode, 12},
                                               {Step::kCap, kPhase, 9},
                                               {Step::kDrop, kCurrent, 0},
                                               {Step::kDrop, kVersion, 0},
                                               {Step::kDrop, kOut, 0},
                                               {Step::kDrop, kHeartbeat, 0},
                                               {Step::kDrop, kChannel, 0},
                                               {Step::kCap, kNode, 6}}) {
    steps.push_back(step);
  }
  std::vector<std::string_view> dropped;
  for (const Step& step : steps) {
    if (width <= 0 || total() <= static_cast<size_t>(width)) break;
    switch (step.what) {
      case Step::kAbbreviate:
        short_headers = true;
        break;
      case Step::kCap:
        cap[step.column] = std::min(cap[step.column], step.cap);
        break;
      case Step::kDrop:
        if (shown[step.column]) dropped.push_back(kHeaders[step.column]);
        shown[step.column] = false;
        break;
    }
  }
  total();
  std::string out;
  auto line = [&](auto cell_of) {
    std::string text;
    for (size_t c = 0; c < kColumns; ++c) {
      if (!shown[c]) continue;
      if (!text.empty()) text += "  ";
      std::string cell = Fit(cell_of(c), widths[c]);
      text += cell;
      text.append(widths[c] - std::min(widths[c], cell.size()), ' ');
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  line([&](size_t c) { return std::string(header(c)); });
  for (const Row& r : rows) {
    line([&](size_t c) { return r.cells[c]; });
    for (const std::string& note : r.notes) out += note;
  }
  if (!dropped.empty()) {
    std::string names;
    for (std::string_view d : dropped) names += (names.empty() ? "" : ", ") + std::string(d);
    out += "(not shown at " + std::to_string(width) + " columns: " + names + "; see --json)\n";
  }
  return out;
}

// `text` as lines of at most `width` columns (0: one line), the later ones indented by
// `indent` spaces; broken at spaces where it can.
std::string Wrap(std::string_view text, int width, size_t indent) {
  if (width <= 0 || text.size() <= static_cast<size_t>(width)) return std::string(text) + "\n";
  std::string out;
  size_t room = static_cast<size_t>(width);
  bool first = true;
  while (!text.empty()) {
    if (!first) out.append(indent, ' ');
    size_t take = text.size();
    if (take > room) {
      take = room;
      const size_t space = text.substr(0, room + 1).rfind(' ');
      if (space != std::string_view::npos && space > room / 2) take = space;
      // Keep UTF-8 sequences whole.
      while (take > 0 && take < text.size() &&
             (static_cast<unsigned char>(text[take]) & 0xc0) == 0x80) {
        --take;
      }
      if (take == 0) take = std::min(room, text.size());
    }
    out += std::string(text.substr(0, take)) + "\n";
    text.remove_prefix(take);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
    first = false;
    room = static_cast<size_t>(std::max<int>(width - static_cast<int>(indent), 10));
  }
  return out;
}

// What the live nodes of `channel` last attested of their live tensors (docs/live.md,
// "Attestation"), in words; empty when none attested.
std::string DescribeAttestations(const wire::FleetStatus& now, const std::string& channel) {
  uint32_t exact = 0;
  std::set<uint64_t> exact_versions;
  std::vector<std::string> mismatched, unknown;
  for (const wire::NodeStatus& node : now.nodes()) {
    if (!node.alive()) continue;
    for (const wire::ChannelProgress& p : node.channels()) {
      if (p.channel() != channel || !p.has_attestation()) continue;
      const wire::Attestation& a = p.attestation();
      const std::string name =
          "node " + std::to_string(node.node_id()) + " v" + std::to_string(a.version());
      switch (a.verdict()) {
        case wire::ATTESTATION_MATCH:
          ++exact;
          exact_versions.insert(a.version());
          break;
        case wire::ATTESTATION_MISMATCH:
          mismatched.push_back(name);
          break;
        case wire::ATTESTATION_UNKNOWN_VERSION:
          unknown.push_back(name);
          break;
        default:
          break;
      }
    }
  }
  if (exact + mismatched.size() + unknown.size() == 0) return "";
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 5) out += ", +" + std::to_string(names.size() - 5) + " more";
    return out;
  };
  std::string out = "attested: " + std::to_string(exact) + " serve exactly the published bytes";
  if (exact_versions.size() == 1) out += " of v" + std::to_string(*exact_versions.begin());
  if (!mismatched.empty()) {
    out += "; " + std::to_string(mismatched.size()) +
           " MISMATCH, live tensors differ from the committed bytes (" + list(mismatched) + ")";
  }
  if (!unknown.empty()) {
    out += "; " + std::to_string(unknown.size()) + " attest an unknown version (" + list(unknown) +
           ")";
  }
  return out;
}

std::string PercentOf(double fraction) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f%%", 100 * fraction);
  return buf;
}

// Rows of cells as left-aligned columns two spaces apart, each line indented by `indent`.
std::string Columns(const std::vector<std::vector<std::string>>& rows, size_t indent) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent, ' ');
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

// How many least advanced nodes and racks to list: up to 10 each, fewer when `max_rows` (0: no
// limit) is short, so that a live view still fits the terminal's height.
struct SummaryLists {
  size_t least_advanced = FleetSummary::kLeastAdvanced;
  size_t racks = 10;
};
SummaryLists ListsFor(size_t max_rows) {
  SummaryLists lists;
  if (max_rows == 0) return lists;
  // The title, states, progress (two lines at 80 columns), two headings, two column headers.
  constexpr size_t kFixedLines = 8;
  const size_t rows = max_rows > kFixedLines + 2 ? max_rows - kFixedLines : 2;
  lists.least_advanced = std::min(lists.least_advanced, (rows + 1) / 2);
  lists.racks = std::min(lists.racks, rows / 2);
  return lists;
}

// A large fleet's summary in place of the fleet table (FleetSummary), its lists cut to `lists`.
std::string RenderFleetSummary(const FleetSummary& f, int width, SummaryLists lists) {
  std::string out = "\n" + Safe(f.channel) + ": " + std::to_string(f.nodes) +
                    " nodes, summarized (--nodes lists every one)\n";
  std::string states = "  states    ";
  for (const auto& [name, count] : f.states) states += name + " " + std::to_string(count) + "  ";
  out += Wrap(states.substr(0, states.find_last_not_of(' ') + 1), width, 12);
  std::string histogram = "  progress  ";
  for (size_t i = 0; i < FleetSummary::kBuckets; ++i) {
    histogram +=
        i == 10 ? "100%" : std::to_string(10 * i) + "-" + std::to_string(10 * i + 10) + "%";
    histogram +=
        " " + std::to_string(f.histogram[i]) + (i + 1 < FleetSummary::kBuckets ? "  " : "");
  }
  out += Wrap(histogram + "  (live agents)", width, 12);
  if (f.least_advanced.empty()) {
    out += "  least advanced: none, every live agent has it or failed\n";
  } else {
    out += "  least advanced\n";
    std::vector<std::vector<std::string>> rows = {{"NODE", "HOST", "RACK", "STATE", "DONE"}};
    for (size_t i = 0; i < f.least_advanced.size() && i < lists.least_advanced; ++i) {
      const FleetSummary::Node& n = f.least_advanced[i];
      rows.push_back({std::to_string(n.node_id), n.hostname.empty() ? "-" : Safe(n.hostname),
                      n.rack.empty() ? "-" : Safe(n.rack), n.state, PercentOf(n.progress)});
    }
    out += Columns(rows, 4);
  }
  if (f.racks.empty()) return out;
  out += f.racks.size() > lists.racks
             ? "  racks, least advanced first (" + std::to_string(f.racks.size() - lists.racks) +
                   " more not shown)\n"
             : "  racks, least advanced first\n";
  std::vector<std::vector<std::string>> rows = {
      {"RACK", "AGENTS", "DONE", "FAILED", "DEAD", "PROGRESS"}};
  for (size_t i = 0; i < f.racks.size() && i < lists.racks; ++i) {
    const FleetSummary::Rack& r = f.racks[i];
    rows.push_back({r.name.empty() ? "-" : Safe(r.name), std::to_string(r.agents),
                    std::to_string(r.done), std::to_string(r.failed), std::to_string(r.dead),
                    PercentOf(r.progress_sum / r.agents)});
  }
  return out + Columns(rows, 4);
}

// Whatever is still longer than `width` (0: no limit) is cut, so that nothing wraps.
std::string FitLines(const std::string& text, int width) {
  if (width <= 0) return text;
  std::string fitted;
  std::string_view rest = text;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    fitted += TruncateColumns(rest.substr(0, nl), static_cast<size_t>(width)) + "\n";
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  return fitted;
}

}  // namespace

std::string RenderStatus(const wire::FleetStatus& now, const wire::FleetStatus* earlier,
                         const ViewOptions& options) {
  std::string out;
  size_t live = 0, dead = 0, left = 0;
  for (const wire::NodeStatus& node : now.nodes()) {
    if (node.left()) {
      ++left;
    } else if (node.alive()) {
      ++live;
    } else {
      ++dead;
    }
  }
  const std::string when = metrics::FormatTimestamp(
      std::chrono::system_clock::time_point(std::chrono::milliseconds(now.now_unix_ms())));
  std::string nodes = "nodes " + std::to_string(live + dead) + " (" + std::to_string(live) +
                      " live, " + std::to_string(dead) + " dead)";
  if (left > 0) nodes += ", " + std::to_string(left) + " left";
  // The first of these that fits: the hint about hidden nodes shortens before it goes.
  std::vector<std::string> headers;
  if (left > 0 && !options.show_left) {
    headers = {"weightcast status  " + when + "  " + nodes + " (--all shows them)",
               "weightcast status  " + when + "  " + nodes + " (--all)",
               when + "  " + nodes + " (--all)"};
  }
  headers.push_back("weightcast status  " + when + "  " + nodes);
  std::string header = headers.back();
  for (const std::string& h : headers) {
    if (options.width <= 0 || h.size() <= static_cast<size_t>(options.width)) {
      header = h;
      break;
    }
  }
  out += header + "\n";
  // The control plane cannot write (etcd without quorum): say so before anything else.
  if (!now.store_problem().empty()) {
    out += Wrap("control plane: " + Safe(now.store_problem()), options.width, 2);
  }

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
    auto describe = [&](const wire::VersionEntry& e) {
      std::string text = "v" + std::to_string(e.version());
      if (e.base_version() != 0) {
        text += " (delta of v" + std::to_string(e.base_version()) + ", payload " +
                FormatBytes(e.payload_bytes()) + ")";
      }
      return text + ", " + FormatBytes(e.total_bytes());
    };
    // The channel's line; a part that would not fit goes on a line of its own.
    std::vector<std::string> parts = {describe(s.entry)};
    if (s.entry.decision() == wire::DECISION_ABORT) {
      parts.push_back("ABORTED: " + Safe(s.entry.abort_reason()));
    }
    std::string line = out.substr(out.rfind('\n') + 1);
    out.resize(out.size() - line.size());
    auto add = [&](const std::string& part, bool own_line) {
      if (own_line || (options.width > 0 &&
                       line.size() + 2 + part.size() > static_cast<size_t>(options.width))) {
        out += line + "\n";
        line = "  " + part;
      } else {
        line += "  " + part;
      }
    };
    for (const std::string& part : parts) add(part, false);
    if (s.target != s.version) {
      // Rolled back or aborted: the bars are about the version the fleet stays on.
      add("fleet current " + describe(s.target_entry) + (s.settled() ? "  settled" : ""), true);
    } else if (s.current_version != 0 && s.current_version != s.version) {
      add("fleet current v" + std::to_string(s.current_version), false);
    }
    if (s.complete() && s.target == s.version) add("complete", false);
    // Nobody to deliver to: said, so that a publish into an empty channel is not a silent wait.
    if (s.followers == 0) add("waiting: 0 agents follow channel " + Safe(s.channel), true);
    if (const std::string attested = DescribeAttestations(now, s.channel); !attested.empty()) {
      add(attested, true);
    }
    out += line + "\n";

    const std::string bytes_figures =
        FormatBytes(s.bytes_done) + " / " + FormatBytes(s.bytes_total);
    std::string bytes_detail = bytes_figures + (s.delta_followers > 0 ? " (delta payloads)" : "");
    const std::string chunks_detail =
        std::to_string(s.chunks_done) + " / " + std::to_string(s.chunks_total);
    std::string nodes_detail =
        std::to_string(s.nodes_done()) + " / " + std::to_string(s.followers) + " done (" +
        std::to_string(s.committed) + " committed, " + std::to_string(s.prepared) + " prepared)";
    if (s.failed > 0) nodes_detail += ", " + std::to_string(s.failed) + " failed";
    if (s.dead > 0) nodes_detail += ", " + std::to_string(s.dead) + " dead";
    // Bars take what the labels and details leave of the width: "  nodes  [" bar "] 100.0%  ".
    constexpr int kFixed = 2 + 7 + 2 + 1 + 6 + 2;
    auto bar_for = [&] {
      const size_t detail =
          std::max({bytes_detail.size(), chunks_detail.size(), nodes_detail.size()});
      return options.width <= 0 ? 40 : options.width - kFixed - static_cast<int>(detail);
    };
    if (bar_for() < 10) {
      // Narrow: the short forms.
      nodes_detail = std::to_string(s.nodes_done()) + "/" + std::to_string(s.followers) + " done";
      if (s.failed > 0) nodes_detail += ", " + std::to_string(s.failed) + " failed";
      if (s.dead > 0) nodes_detail += ", " + std::to_string(s.dead) + " dead";
      bytes_detail = bytes_figures + (s.delta_followers > 0 ? " delta" : "");
    }
    const int bar = std::clamp(bar_for(), 10, 60);
    char pct[16];
    auto row = [&](std::string_view label, uint64_t done, uint64_t total, std::string detail) {
      std::snprintf(pct, sizeof(pct), "%6s", Percent(done, total).c_str());
      out += "  ";
      out += label;
      out.append(7 - label.size(), ' ');
      out += ProgressBar(Fraction(done, total), bar) + " " + pct + "  " + detail + "\n";
    };
    row("bytes", s.bytes_done, s.bytes_total, bytes_detail);
    row("chunks", s.chunks_done, s.chunks_total, chunks_detail);
    row("nodes", s.nodes_done(), s.followers, nodes_detail);
    std::string rate = "  rate   verified " + FormatRate(s.verified_bytes_per_s) + ", received " +
                       FormatRate(s.received_bytes_per_s) + ", sent " + FormatBytes(s.bytes_sent) +
                       " in all  ETA " + FormatEta(s.eta_s);
    if (options.width > 0 && rate.size() > static_cast<size_t>(options.width)) {
      rate = "  rate   " + FormatRate(s.verified_bytes_per_s) + "  ETA " + FormatEta(s.eta_s);
    }
    out += rate + "\n";
  }

  const size_t listed = live + dead + (options.show_left ? left : 0);
  if (!options.list_nodes && listed > kSummaryAboveNodes) {
    const size_t rows_per_channel = options.max_table_rows / std::max<size_t>(1, summaries.size());
    for (const ChannelSummary& s : summaries) {
      out += RenderFleetSummary(SummarizeFleetChannel(now, s), options.width,
                                ListsFor(options.max_table_rows == 0 ? 0 : rows_per_channel));
    }
    return FitLines(out, options.width);
  }

  // The fleet table: one row per node and channel it reports on (or one row with no channel).
  std::map<std::string, std::pair<uint64_t, uint64_t>> targets;  // channel -> target, newest
  for (const ChannelSummary& s : summaries) targets[s.channel] = {s.target, s.version};
  std::vector<Row> rows;
  std::set<std::string> channels_shown;
  for (const wire::NodeStatus& node : now.nodes()) {
    if (node.left() && !options.show_left) continue;
    std::string name = std::to_string(node.node_id());
    if (!node.hostname().empty()) name += " " + Safe(node.hostname());
    if (node.source()) name += " (source)";
    const std::string alive = node.left() ? "left" : node.alive() ? "yes" : "DEAD";
    auto base = [&](int priority, bool failed) {
      Row r{priority, failed, node.source(), node.node_id(), {}, {}};
      r.cells = {name, node.rack().empty() ? "-" : Safe(node.rack()), alive};
      return r;
    };
    bool any = false;
    for (const wire::ChannelProgress& p : node.channels()) {
      if (!options.channel.empty() && p.channel() != options.channel) continue;
      any = true;
      channels_shown.insert(p.channel());
      auto it = targets.find(p.channel());
      const bool current =
          it != targets.end() && HasCurrent(p, it->second.first, it->second.second);
      const bool done = p.phase() == wire::PHASE_SEEDING || current;
      const bool failed = p.phase() == wire::PHASE_FAILED;
      const int priority = node.left() ? 4 : failed ? 0 : !node.alive() ? 1 : !done ? 2 : 3;
      Row r = base(priority, failed);
      std::string phase(PhaseName(p.phase()));
      if (p.phase() == wire::PHASE_FETCHING && p.delta()) phase += "/delta";
      uint64_t done_bytes = p.bytes_done(), total_bytes = p.bytes_total();
      if (p.phase() == wire::PHASE_FETCHING && p.delta() && it != targets.end()) {
        // A delta fetch: wire bytes against the payloads it needs.
        for (const wire::ChannelLog& log : now.channels()) {
          if (log.channel() != p.channel()) continue;
          const wire::VersionEntry* e = FindEntry(log, p.version());
          if (e != nullptr && e->payload_bytes() > 0) {
            done_bytes = p.bytes_received();
            total_bytes = e->payload_bytes();
          }
        }
      }
      std::string done_cell = Percent(done_bytes, total_bytes);
      if (p.phase() == wire::PHASE_COMMITTED || p.phase() == wire::PHASE_SEEDING || current) {
        done_cell = "100.0%";
      }
      r.cells.insert(r.cells.end(),
                     {Safe(p.channel()), phase, p.version() ? std::to_string(p.version()) : "-",
                      p.current_version() ? std::to_string(p.current_version()) : "-", done_cell,
                      FormatBytes(p.bytes_received()), FormatBytes(p.bytes_sent()),
                      FormatAgo(node.last_heartbeat_ms_ago())});
      if (p.peers_ucx() > 0) {
        r.notes.push_back("    transport: node " + std::to_string(node.node_id()) + " " +
                          std::to_string(p.peers_ucx()) + " of " + std::to_string(p.peers()) +
                          " peers over UCX");
      }
      if (!p.error().empty()) {
        r.notes.push_back(Wrap("    error: node " + std::to_string(node.node_id()) + " " +
                                   Safe(p.channel()) + " v" + std::to_string(p.version()) + ": " +
                                   Safe(p.error()),
                               options.width, 6));
      }
      if (!p.waiting().empty()) {
        r.notes.push_back(Wrap("    waiting: node " + std::to_string(node.node_id()) + " " +
                                   Safe(p.channel()) + ": " + Safe(p.waiting()),
                               options.width, 6));
      }
      rows.push_back(std::move(r));
    }
    if (!any) {
      Row r = base(node.left() ? 4 : node.alive() ? 2 : 1, false);
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
  // Failed ones first, with their errors; then the sources, then by node id.
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    if (a.failed != b.failed) return a.failed;
    if (a.source != b.source) return a.source;
    return a.node_id < b.node_id;
  });
  out += "\n" + RenderTable(rows, options.width, channels_shown.size() <= 1);
  if (hidden > 0) out += "... " + std::to_string(hidden) + " more rows (done ones first hidden)\n";
  return FitLines(out, options.width);
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
