#include "metrics/registry.h"

#include <prometheus/client_metric.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include "util/text.h"

namespace weightcast::metrics {
namespace {

// What a series holds. The family's TYPE follows from it (both counter kinds are "counter").
enum SeriesKind : int { kCounter, kCounterFunc, kGauge, kGaugeFunc, kHistogram };

prometheus::MetricType TypeOf(int kind) {
  switch (kind) {
    case kCounter:
    case kCounterFunc:
      return prometheus::MetricType::Counter;
    case kGauge:
    case kGaugeFunc:
      return prometheus::MetricType::Gauge;
    default:
      return prometheus::MetricType::Histogram;
  }
}

std::string_view TypeName(prometheus::MetricType type) {
  switch (type) {
    case prometheus::MetricType::Counter:
      return "counter";
    case prometheus::MetricType::Gauge:
      return "gauge";
    case prometheus::MetricType::Histogram:
      return "histogram";
    default:
      return "untyped";
  }
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

// A key that identifies a label set (sorted by name) within its family.
std::string LabelKey(const Labels& sorted) {
  std::string out;
  for (const auto& [name, value] : sorted) {
    out += name;
    out += '\0';
    out += value;
    out += '\0';
  }
  return out;
}

std::map<std::string, std::string> LabelMap(const Labels& labels) {
  return std::map<std::string, std::string>(labels.begin(), labels.end());
}

// A metric of a rejected registration and its handle, owned together.
template <typename Value, typename Handle>
struct Orphan {
  Value value;
  Handle handle{value};
};

// A new orphan, kept in `orphans` for as long as the registry lives.
template <typename O>
O& KeepOrphan(std::vector<std::shared_ptr<void>>& orphans) {
  auto orphan = std::make_shared<O>();
  orphans.push_back(orphan);
  return *orphan;
}

// prometheus-cpp's family in `*slot`, registered in `store` under `name` on first use.
template <typename T>
prometheus::Family<T>& FamilyIn(prometheus::Family<T>*& slot,
                                prometheus::detail::Builder<T> builder, std::string_view name,
                                const std::string& help, prometheus::Registry& store) {
  if (slot == nullptr)
    slot = &builder.Name(std::string(name)).Help(EscapeHelp(help)).Register(store);
  return *slot;
}

}  // namespace

void Counter::Add(uint64_t n) { impl_->Increment(static_cast<double>(n)); }
uint64_t Counter::value() const { return static_cast<uint64_t>(impl_->Value()); }

void Gauge::Set(double v) { impl_->Set(v); }
void Gauge::Add(double delta) { impl_->Increment(delta); }
double Gauge::value() const { return impl_->Value(); }

void Histogram::Observe(double v) { impl_->Observe(v); }

uint64_t Histogram::bucket_count(size_t i) const {
  const prometheus::ClientMetric::Histogram h = impl_->Collect().histogram;
  if (i >= h.bucket.size()) return 0;
  return h.bucket[i].cumulative_count - (i == 0 ? 0 : h.bucket[i - 1].cumulative_count);
}

uint64_t Histogram::count() const { return impl_->Collect().histogram.sample_count; }
double Histogram::sum() const { return impl_->Collect().histogram.sample_sum; }

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
  prometheus::MetricType type = prometheus::MetricType::Untyped;
  // prometheus-cpp's family of each value kind, made on its first series.
  prometheus::Family<prometheus::Counter>* counters = nullptr;
  prometheus::Family<prometheus::Gauge>* gauges = nullptr;
  prometheus::Family<prometheus::Histogram>* histograms = nullptr;
  std::map<std::string, std::unique_ptr<Series>, std::less<>> series;  // by LabelKey
};

Registry::Registry() : store_(std::make_shared<prometheus::Registry>()) {}
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
    family->type = TypeOf(kind);
    it = families_.emplace(std::string(name), std::move(family)).first;
  }
  Family& family = *it->second;
  if (family.type != TypeOf(kind)) {
    RecordErrorLocked("metric " + std::string(name) + " is a " +
                      std::string(TypeName(family.type)) + ", asked for as a " +
                      std::string(TypeName(TypeOf(kind))));
    return nullptr;
  }
  std::string key = LabelKey(labels);
  auto sit = family.series.find(key);
  if (sit != family.series.end()) {
    if (sit->second->kind != kind) {
      RecordErrorLocked("metric " + std::string(name) + " with labels {" + EscapeControlBytes(key) +
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
    return KeepOrphan<Orphan<prometheus::Counter, metrics::Counter>>(orphans_).handle;
  }
  if (!series->counter) {
    Family& family = *families_.find(name)->second;
    series->counter = std::make_unique<metrics::Counter>(
        FamilyIn(family.counters, prometheus::BuildCounter(), name, family.help, *store_)
            .Add(LabelMap(series->labels)));
  }
  return *series->counter;
}

metrics::Gauge& Registry::Gauge(std::string_view name, std::string_view help, Labels labels) {
  std::lock_guard lock(mu_);
  Series* series = FindOrCreateLocked(name, help, kGauge, std::move(labels));
  if (series == nullptr) {
    return KeepOrphan<Orphan<prometheus::Gauge, metrics::Gauge>>(orphans_).handle;
  }
  if (!series->gauge) {
    Family& family = *families_.find(name)->second;
    series->gauge = std::make_unique<metrics::Gauge>(
        FamilyIn(family.gauges, prometheus::BuildGauge(), name, family.help, *store_)
            .Add(LabelMap(series->labels)));
  }
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
    struct OrphanHistogram {
      prometheus::Histogram value{prometheus::Histogram::BucketBoundaries{}};
      metrics::Histogram handle{value, {}};
    };
    return KeepOrphan<OrphanHistogram>(orphans_).handle;
  }
  if (!series->histogram) {
    Family& family = *families_.find(name)->second;
    series->histogram = std::make_unique<metrics::Histogram>(
        FamilyIn(family.histograms, prometheus::BuildHistogram(), name, family.help, *store_)
            .Add(LabelMap(series->labels), bounds),
        bounds);
  }
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
  auto sit = series.find(LabelKey(sorted));
  if (sit == series.end()) return;
  if (sit->second->kind != kCounterFunc && sit->second->kind != kGaugeFunc) return;
  series.erase(sit);
  // The family stays (with its HELP and TYPE) so that a later registration keeps its type;
  // Render() skips families without series.
}

std::string Registry::Render() const {
  std::lock_guard lock(mu_);
  // The values prometheus-cpp holds, by family name; callback series are added to them here.
  std::map<std::string, prometheus::MetricFamily, std::less<>> collected;
  for (prometheus::MetricFamily& f : store_->Collect()) {
    std::string name = f.name;
    collected.emplace(std::move(name), std::move(f));
  }
  std::vector<prometheus::MetricFamily> page;
  for (const auto& [name, family] : families_) {
    prometheus::MetricFamily out;
    if (auto it = collected.find(name); it != collected.end()) {
      out = std::move(it->second);
    } else {
      out.name = name;
      out.help = EscapeHelp(family->help);
      out.type = family->type;
    }
    for (const auto& [key, series] : family->series) {
      if (series->kind != kCounterFunc && series->kind != kGaugeFunc) continue;
      prometheus::ClientMetric m;
      for (const auto& [label, value] : series->labels) m.label.push_back({label, value});
      if (series->kind == kCounterFunc) {
        m.counter.value = static_cast<double>(series->counter_fn ? series->counter_fn() : 0);
      } else {
        m.gauge.value = series->gauge_fn ? series->gauge_fn() : 0.0;
      }
      out.metric.push_back(std::move(m));
    }
    if (out.metric.empty()) continue;
    std::sort(out.metric.begin(), out.metric.end(),
              [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                return a.label < b.label;
              });
    page.push_back(std::move(out));
  }
  std::string text;
  for (const std::string& error : errors_) {
    text += "# weightcast: rejected registration: ";
    text += EscapeHelp(error);
    text += '\n';
  }
  text += prometheus::TextSerializer().Serialize(page);
  return text;
}

std::vector<std::string> Registry::errors() const {
  std::lock_guard lock(mu_);
  return errors_;
}

}  // namespace weightcast::metrics
