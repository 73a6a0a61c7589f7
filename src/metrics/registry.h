// Process metrics in the Prometheus text exposition format 0.0.4 (docs/metrics.md).
//
// A daemon owns one Registry, asks it once for each metric it updates and keeps the returned
// reference; updates are then single atomic operations (no lock, no allocation), so hot paths
// (a chunk verified, bytes sent) can count freely. Render() produces the page that
// metrics::MetricsServer serves at /metrics.
//
//   metrics::Registry registry;
//   metrics::Counter& verified = registry.Counter(
//       "weightcast_chunks_verified_total", "Chunks verified against the manifest",
//       {{"channel", "policy"}});
//   verified.Add();
//
// Registration (Counter(), Gauge(), Histogram(), the *Func calls) takes a mutex and may allocate;
// asking again with the same name and label set returns the very same metric. A metric lives as
// long as its Registry; references never dangle before that.
#pragma once

#include <atomic>
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

namespace weightcast::metrics {

// Label pairs of one metric, e.g. {{"channel", "policy"}, {"peer", "17"}}. Order does not
// matter: a label set is identified by its pairs sorted by name.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count (events, bytes). Thread-safe and lock-free.
class Counter {
 public:
  void Add(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down (queue depth, bytes staged, live peers). Thread-safe and
// lock-free (Add is a compare-and-swap loop on the double).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double delta) { value_.fetch_add(delta, std::memory_order_relaxed); }
  void Sub(double delta) { Add(-delta); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

// Counts observations into fixed buckets (cumulative on the page, as Prometheus wants) and keeps
// their sum. Thread-safe and lock-free. A scrape that races with Observe may see the sum of an
// observation before its bucket; `_count` is computed from the buckets, so it always equals the
// `+Inf` bucket.
class Histogram {
 public:
  // `bounds`: finite upper bounds, strictly increasing (checked by Registry::Histogram).
  explicit Histogram(std::vector<double> bounds);

  void Observe(double v);

  const std::vector<double>& bounds() const { return bounds_; }
  // Non-cumulative count of bucket i; i == bounds().size() is the +Inf bucket.
  uint64_t bucket_count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1
  std::atomic<double> sum_{0.0};
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
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  std::vector<std::string> errors_;
  // Metrics handed out for rejected registrations: usable, never rendered.
  std::vector<std::unique_ptr<metrics::Counter>> orphan_counters_;
  std::vector<std::unique_ptr<metrics::Gauge>> orphan_gauges_;
  std::vector<std::unique_ptr<metrics::Histogram>> orphan_histograms_;
};

// Text format helpers, exposed for tests and for other pages that want the same escaping.
// Label values escape backslash, double quote and newline; HELP text escapes backslash and
// newline.
std::string EscapeLabelValue(std::string_view value);
std::string EscapeHelp(std::string_view help);
// Shortest text that parses back to `v`; "+Inf", "-Inf", "NaN" for the special values.
std::string FormatValue(double v);

}  // namespace weightcast::metrics
