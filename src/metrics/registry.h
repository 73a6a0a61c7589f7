// Process metrics in the Prometheus text exposition format 0.0.4 (docs/metrics.md), kept and
// rendered by prometheus-cpp (Debian's prometheus-cpp-dev, the core library only).
//
// A daemon owns one Registry, asks it once for each metric it updates and keeps the returned
// reference; updates are then single atomic operations on prometheus-cpp's metric (no lock, no
// allocation; a histogram's Observe takes the library's per-histogram mutex), so hot paths (a
// chunk verified, bytes sent) can count freely. Render() produces the page that
// metrics::MetricsServer serves at /metrics.
//
//   metrics::Registry registry;
//   metrics::Counter& verified = registry.Counter(
//       "weightcast_chunks_verified_total", "Chunks verified against the manifest",
//       {{"channel", "policy"}});
//   verified.Add();
//
// What this class adds to prometheus-cpp's registry (docs/metrics.md, "prometheus-cpp"): a name
// or label that is not Prometheus's, or a name reused with another type, is recorded and the
// caller still gets a working metric (the library throws); callback metrics, read when the page
// is rendered (the library has none); a page sorted by family and label set; HELP text escaped
// (prometheus-cpp 1.0 writes it verbatim).
//
// Registration (Counter(), Gauge(), Histogram(), the *Func calls) takes a mutex and may allocate;
// asking again with the same name and label set returns the very same metric. A metric lives as
// long as its Registry; references never dangle before that.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <weightcast/status.h>

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
}  // namespace prometheus

namespace weightcast::metrics {

// Label pairs of one metric, e.g. {{"channel", "policy"}, {"peer", "17"}}. Order does not
// matter: a label set is identified by its pairs sorted by name.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count (events, bytes). Thread-safe and lock-free. Kept as a
// double by prometheus-cpp: exact up to 2^53.
class Counter {
 public:
  explicit Counter(prometheus::Counter& impl) : impl_(&impl) {}
  void Add(uint64_t n = 1);
  uint64_t value() const;

 private:
  prometheus::Counter* impl_;
};

// A value that goes up and down (queue depth, bytes staged, live peers). Thread-safe and
// lock-free.
class Gauge {
 public:
  explicit Gauge(prometheus::Gauge& impl) : impl_(&impl) {}
  void Set(double v);
  void Add(double delta);
  void Sub(double delta) { Add(-delta); }
  double value() const;

 private:
  prometheus::Gauge* impl_;
};

// Counts observations into fixed buckets (cumulative on the page, as Prometheus wants) and keeps
// their sum. Thread-safe.
class Histogram {
 public:
  // `bounds`: finite upper bounds, strictly increasing (checked by Registry::Histogram).
  Histogram(prometheus::Histogram& impl, std::vector<double> bounds)
      : impl_(&impl), bounds_(std::move(bounds)) {}

  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i; i == bounds().size() is the +Inf bucket.
  uint64_t bucket_count(size_t i) const;
  uint64_t count() const;
  double sum() const;

 private:
  prometheus::Histogram* impl_;
  std::vector<double> bounds_;
};

// Bucket bounds start, start*factor, ... (count of them), for latencies and sizes.
std::vector<double> ExponentialBuckets(double start, double factor, size_t count);

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The metric `name` with `labels`, created on first use. Safe to call from any thread.
  //
  // Metric and label names follow Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without ':' and
  // not starting with "__"; a histogram may not use "le"). Names come from our code, so a bad
  // one is a bug: it is reported through errors() and on the page as a comment, and the call
  // returns a working metric that is not exported, so the daemon keeps running. The same
  // happens when a name is reused with another type.
  //
  // `help` is taken from the first registration of the name.
  metrics::Counter& Counter(std::string_view name, std::string_view help, Labels labels = {});
  metrics::Gauge& Gauge(std::string_view name, std::string_view help, Labels labels = {});
  // `bounds` are those of the first registration of name+labels; later calls ignore theirs.
  metrics::Histogram& Histogram(std::string_view name, std::string_view help,
                                std::vector<double> bounds, Labels labels = {});

  // Metrics whose value is read when the page is rendered (e.g. the size of a map owned by the
  // daemon). `fn` runs under the registry's lock during Render(): it must be quick and must not
  // call into the registry. Registering the same name+labels again replaces `fn`. The caller
  // keeps whatever `fn` captures alive as long as the Registry, or calls Remove() first.
  void CounterFunc(std::string_view name, std::string_view help, Labels labels,
                   std::function<uint64_t()> fn);
  void GaugeFunc(std::string_view name, std::string_view help, Labels labels,
                 std::function<double()> fn);
  // Drops the *Func metric name+labels (no-op when absent). Only callback metrics can be
  // removed: removing a Counter/Gauge/Histogram would leave references dangling.
  void Remove(std::string_view name, const Labels& labels);

  // The whole page in text format 0.0.4: families sorted by name, each with one HELP and one
  // TYPE line, then its samples sorted by label set. Safe to call from any thread.
  std::string Render() const;

  // Registration errors so far (bad names, type conflicts), oldest first.
  std::vector<std::string> errors() const;

 private:
  struct Family;
  struct Series;

  // Finds or creates the series; returns null (and records why) when the request is invalid.
  Series* FindOrCreateLocked(std::string_view name, std::string_view help, int type, Labels labels);
  void RecordErrorLocked(std::string message);

  mutable std::mutex mu_;
  // Holds every Counter, Gauge and Histogram handed out under a valid name, and renders them.
  std::shared_ptr<prometheus::Registry> store_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  std::vector<std::string> errors_;
  // Metrics handed out for rejected registrations (each with its prometheus-cpp value):
  // usable, never rendered.
  std::vector<std::shared_ptr<void>> orphans_;
};

// HELP text as the text format wants it: backslash and newline escaped.
std::string EscapeHelp(std::string_view help);
// Shortest text that parses back to `v`; "+Inf", "-Inf", "NaN" for the special values.
std::string FormatValue(double v);

}  // namespace weightcast::metrics
