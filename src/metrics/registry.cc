#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "util/text.h"

namespace weightcast::metrics {
namespace {

// What a series holds. The family's TYPE follows from it (both counter kinds are "counter").
enum SeriesKind : int { kCounter, kCounterFunc, kGauge, kGaugeFunc, kHistogram };

std::string_view TypeName(int kind) {
  switch (kind) {
    case kCounter:
    case kCounterFunc:
      return "counter";
    case kGauge:
    case kGaugeFunc:
      return "gauge";
    case kHistogram:
      return "histogram";
  }
  return "untyped";
}

bool IsMetricNameChar(char c, bool first) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsMetricNameChar(name[i], i == 0)) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] == ':' || !IsMetricNameChar(name[i], i == 0)) return false;
  }
  return true;
}

// `a="x",b="y"`: the label part of a sample line, and the key that sorts and identifies a series.
std::string RenderLabels(const Labels& sorted) {
  std::string out;
  for (const auto& [name, value] : sorted) {
    if (!out.empty()) out += ',';
    out += name;
    out += "=\"";
    out += EscapeLabelValue(value);
    out += '"';
  }
  return out;
}

void AppendSample(std::string& out, std::string_view name, std::string_view suffix,
                  std::string_view labels, std::string_view extra_label, std::string_view value) {
  out += name;
  out += suffix;
  if (!labels.empty() || !extra_label.empty()) {
    out += '{';
    out += labels;
    if (!labels.empty() && !extra_label.empty()) out += ',';
    out += extra_label;
    out += '}';
  }
  out += ' ';
  out += value;
  out += '\n';
}

}  // namespace

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  if (ec != std::errc()) return "NaN";  // cannot happen: 64 bytes hold any double
  return std::string(buf, end);
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

void Histogram::Observe(double v) {
  // Bucket i counts bounds_[i-1] < v <= bounds_[i]; NaN and values above every bound go to +Inf.
  size_t i = bounds_.size();
  if (!std::isnan(v)) {
    i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  }
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

uint64_t Histogram::count() const {
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) total += bucket_count(i);
  return total;
}

std::vector<double> ExponentialBuckets(double start, double factor, size_t count) {
  std::vector<double> bounds;
  bounds.reserve(count);
  double b = start;
  for (size_t i = 0; i < count; ++i, b *= factor) bounds.push_back(b);
  return bounds;
}

struct Registry::Series {
  int kind = kCounter;
  Labels labels;  // sorted by name
  std::unique_ptr<metrics::Counter> counter;
  std::unique_ptr<metrics::Gauge> gauge;
  std::unique_ptr<metrics::Histogram> histogram;
  std::function<uint64_t()> counter_fn;
  std::function<double()> gauge_fn;
};

struct Registry::Family {
  std::string help;
  std::string_view type;
  // Keyed by the rendered label set, which sorts the page and identifies the series.
  std::map<std::string, std::unique_ptr<Series>, std::less<>> series;
};

Registry::Registry() = default;
Registry::~Registry() = default;

void Registry::RecordErrorLocked(std::string message) { errors_.push_back(std::move(message)); }

Registry::Series* Registry::FindOrCreateLocked(std::string_view name, std::string_view help,
                                               int kind, Labels labels) {
  if (!ValidMetricName(name)) {
    RecordErrorLocked("metric name '" + EscapeControlBytes(name) + "' is not a Prometheus name");
    return nullptr;
  }
  std::sort(labels.begin(), labels.end());
  std::set<std::string_view> seen;
  for (const auto& [label, value] : labels) {
    if (!ValidLabelName(label) || (kind == kHistogram && label == "le")) {
      RecordErrorLocked("metric " + std::string(name) + ": label name '" +
                        EscapeControlBytes(label) + "' is not allowed");
      return nullptr;
    }
    if (!seen.insert(label).second) {
      RecordErrorLocked("metric " + std::string(name) + ": label '" + label + "' given twice");
      return nullptr;
    }
  }
  auto it = families_.find(name);
  if (it == families_.end()) {
    auto family = std::make_unique<Family>();
    family->help = std::string(help);
    family->type = TypeName(kind);
    it = families_.emplace(std::string(name), std::move(family)).first;
  }
  Family& family = *it->second;
  if (family.type != TypeName(kind)) {
    RecordErrorLocked("metric " + std::string(name) + " is a " + std::string(family.type) +
                      ", asked for as a " + std::string(TypeName(kind)));
    return nullptr;
  }
  std::string key = RenderLabels(labels);
  auto sit = family.series.find(key);
  if (sit != family.series.end()) {
    if (sit->second->kind != kind) {
      RecordErrorLocked("metric " + std::string(name) + "{" + key +
                        "} is registered both as a value and as a callback");
      return nullptr;
    }
    return sit->second.get();
  }
  auto series = std::make_unique<Series>();
  series->kind = kind;
  series->labels = std::move(labels);
  return family.series.emplace(std::move(key), std::move(series)).first->second.get();
}

metrics::Counter& Registry::Counter(std::string_view name, std::string_view help, Labels labels) {
  std::lock_guard lock(mu_);
  Series* series = FindOrCreateLocked(name, help, kCounter, std::move(labels));
  if (series == nullptr) {
    return *orphan_counters_.emplace_back(std::make_unique<metrics::Counter>());
  }
  if (!series->counter) series->counter = std::make_unique<metrics::Counter>();
  return *series->counter;
}

metrics::Gauge& Registry::Gauge(std::string_view name, std::string_view help, Labels labels) {
  std::lock_guard lock(mu_);
  Series* series = FindOrCreateLocked(name, help, kGauge, std::move(labels));
  if (series == nullptr) return *orphan_gauges_.emplace_back(std::make_unique<metrics::Gauge>());
  if (!series->gauge) series->gauge = std::make_unique<metrics::Gauge>();
  return *series->gauge;
}

metrics::Histogram& Registry::Histogram(std::string_view name, std::string_view help,
                                        std::vector<double> bounds, Labels labels) {
  std::lock_guard lock(mu_);
  bool bounds_ok = true;
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i - 1] < bounds[i]))) bounds_ok = false;
  }
  Series* series = nullptr;
  if (!bounds_ok) {
    RecordErrorLocked("histogram " + EscapeControlBytes(name) +
                      ": bucket bounds must be finite and strictly increasing");
  } else {
    series = FindOrCreateLocked(name, help, kHistogram, std::move(labels));
  }
  if (series == nullptr) {
    return *orphan_histograms_.emplace_back(
        std::make_unique<metrics::Histogram>(std::vector<double>{}));
  }
  if (!series->histogram) series->histogram = std::make_unique<metrics::Histogram>(bounds);
  return *series->histogram;
}

void Registry::CounterFunc(std::string_view name, std::string_view help, Labels labels,
                           std::function<uint64_t()> fn) {
  std::lock_guard lock(mu_);
  Series* series = FindOrCreateLocked(name, help, kCounterFunc, std::move(labels));
  if (series != nullptr) series->counter_fn = std::move(fn);
}

void Registry::GaugeFunc(std::string_view name, std::string_view help, Labels labels,
                         std::function<double()> fn) {
  std::lock_guard lock(mu_);
  Series* series = FindOrCreateLocked(name, help, kGaugeFunc, std::move(labels));
  if (series != nullptr) series->gauge_fn = std::move(fn);
}

void Registry::Remove(std::string_view name, const Labels& labels) {
  std::lock_guard lock(mu_);
  auto it = families_.find(name);
  if (it == families_.end()) return;
  Labels sorted = labels;
  std::sort(sorted.begin(), sorted.end());
  auto& series = it->second->series;
  auto sit = series.find(RenderLabels(sorted));
  if (sit == series.end()) return;
  if (sit->second->kind != kCounterFunc && sit->second->kind != kGaugeFunc) return;
  series.erase(sit);
  // The family stays (with its HELP and TYPE) so that a later registration keeps its type;
  // Render() skips families without series.
}

std::string Registry::Render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const std::string& error : errors_) {
    out += "# weightcast: rejected registration: ";
    out += EscapeHelp(error);
    out += '\n';
  }
  for (const auto& [name, family] : families_) {
    if (family->series.empty()) continue;
    out += "# HELP ";
    out += name;
    out += ' ';
    out += EscapeHelp(family->help);
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += family->type;
    out += '\n';
    for (const auto& [labels, series] : family->series) {
      switch (series->kind) {
        case kCounter:
          AppendSample(out, name, "", labels, "", std::to_string(series->counter->value()));
          break;
        case kCounterFunc:
          AppendSample(out, name, "", labels, "",
                       std::to_string(series->counter_fn ? series->counter_fn() : 0));
          break;
        case kGauge:
          AppendSample(out, name, "", labels, "", FormatValue(series->gauge->value()));
          break;
        case kGaugeFunc:
          AppendSample(out, name, "", labels, "",
                       FormatValue(series->gauge_fn ? series->gauge_fn() : 0.0));
          break;
        case kHistogram: {
          const metrics::Histogram& h = *series->histogram;
          uint64_t cumulative = 0;
          for (size_t i = 0; i < h.bounds().size(); ++i) {
            cumulative += h.bucket_count(i);
            AppendSample(out, name, "_bucket", labels, "le=\"" + FormatValue(h.bounds()[i]) + "\"",
                         std::to_string(cumulative));
          }
          cumulative += h.bucket_count(h.bounds().size());
          AppendSample(out, name, "_bucket", labels, "le=\"+Inf\"", std::to_string(cumulative));
          AppendSample(out, name, "_sum", labels, "", FormatValue(h.sum()));
          AppendSample(out, name, "_count", labels, "", std::to_string(cumulative));
          break;
        }
      }
    }
  }
  return out;
}

std::vector<std::string> Registry::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

}  // namespace weightcast::metrics
