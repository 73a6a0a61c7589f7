// Bindings of weightcast::Subscriber and ReceivedVersion (<weightcast/subscriber.h>):
// `_StoreSubscriber` and `_OpenedVersion`. python/weightcast/_subscriber.py and _version.py wrap
// them; Python maps the files itself (copy-on-write), from the descriptors the version holds.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <weightcast/subscriber.h>

#include "bindings.h"

namespace weightcast::python {
namespace {

// What Python sees of a ReceivedVersion: plain data plus the open descriptors.
class PyOpenedVersion {
 public:
  explicit PyOpenedVersion(ReceivedVersion version) : version_(std::move(version)) {}

  const std::string& channel() const { return version_.channel(); }
  uint64_t version() const { return version_.version().value(); }
  std::string path() const { return version_.path().string(); }
  const std::string& root() const { return version_.root(); }
  uint64_t chunk_size() const { return version_.chunk_size(); }
  uint64_t total_size() const { return version_.total_size(); }
  uint32_t chunk_count() const { return version_.chunk_count(); }
  const std::map<std::string, std::string>& metadata() const { return version_.metadata(); }
  std::optional<uint64_t> base_version() const {
    const std::optional<Version> base = version_.base_version();
    return base ? std::optional<uint64_t>(base->value()) : std::nullopt;
  }

  // [(relative path, size)], in manifest order.
  py::list files() const {
    py::list out;
    for (const VersionFile& f : version_.files()) out.append(py::make_tuple(f.path, f.size));
    return out;
  }
  // [(name, dtype, shape, file index, offset in the file, byte size)], in offset order.
  py::list tensors() const {
    py::list out;
    for (const TensorLocation& t : version_.tensor_locations()) {
      py::tuple shape(t.shape.size());
      for (size_t i = 0; i < t.shape.size(); ++i) shape[i] = py::int_(t.shape[i]);
      out.append(py::make_tuple(t.name, t.dtype, shape, t.file_index, t.offset, t.size));
    }
    return out;
  }
  // A tensor-subset agent's version: (patterns, names of the tensors not received); None when
  // the version is whole.
  py::object partial() const {
    if (!version_.partial()) return py::none();
    py::list patterns, missing;
    for (const std::string& p : version_.tensor_patterns()) patterns.append(p);
    for (const std::string& name : version_.unselected_tensors()) missing.append(name);
    return py::make_tuple(patterns, missing);
  }
  int fileno(size_t index) const {
    const int fd = version_.file_descriptor(index);
    if (fd < 0) {
      Throw(FailedPrecondition("file " + std::to_string(index) + " of version " +
                               std::to_string(version()) + " is not open"));
    }
    return fd;
  }
  // Python has mapped what it needs; the mappings hold their own descriptors.
  void close_files() { version_.CloseDescriptors(); }

 private:
  ReceivedVersion version_;
};

// What Python sees of a VersionStream: each tensor as its place in the files (Python maps them
// copy-on-write, as for a Version), waits in slices so that Ctrl-C gets through.
class PyVersionStream {
 public:
  PyVersionStream(std::unique_ptr<VersionStream> stream, std::optional<double> timeout_s)
      : stream_(std::move(stream)),
        deadline_(timeout_s ? std::optional(std::chrono::steady_clock::now() +
                                            std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                std::chrono::duration<double>(*timeout_s)))
                            : std::nullopt),
        timeout_s_(timeout_s) {}

  // (name, dtype, shape, file index, offset in the file, byte size), or None after the last.
  py::object Next() {
    Result<std::optional<TensorView>> next = WaitInSlices<std::optional<TensorView>>(
        Remaining(), [&](std::chrono::nanoseconds slice) { return stream_->Next(slice); });
    if (!next.ok() && next.status().code() == Code::kDeadlineExceeded) {
      Throw(DeadlineExceeded("stream of v" + std::to_string(version()) + ": " +
                             std::to_string(stream_->handed_over()) + " of " +
                             std::to_string(stream_->tensor_count()) +
                             " tensors handed over within " + std::to_string(*timeout_s_) + " s"));
    }
    if (!ValueOrThrow(std::move(next)).has_value()) return py::none();
    const TensorLocation t = stream_->last_location();
    py::tuple shape(t.shape.size());
    for (size_t i = 0; i < t.shape.size(); ++i) shape[i] = py::int_(t.shape[i]);
    return py::make_tuple(t.name, t.dtype, shape, t.file_index, t.offset, t.size);
  }
  void WaitCommitted() {
    Result<bool> done = WaitInSlices<bool>(Remaining(), [&](std::chrono::nanoseconds slice) {
      Status s = stream_->WaitCommitted(slice);
      return s.ok() ? Result<bool>(true) : Result<bool>(s);
    });
    if (!done.ok() && done.status().code() == Code::kDeadlineExceeded) {
      Throw(DeadlineExceeded("v" + std::to_string(version()) + " was not committed within " +
                             std::to_string(*timeout_s_) + " s"));
    }
    ValueOrThrow(std::move(done));
  }
  py::list files() const {
    py::list out;
    for (const VersionFile& f : stream_->files()) out.append(py::make_tuple(f.path, f.size));
    return out;
  }
  int fileno(size_t index) const {
    const int fd = stream_->file_descriptor(index);
    if (fd < 0) Throw(InvalidArgument("no file " + std::to_string(index)));
    return fd;
  }
  uint64_t version() const { return stream_->version().value(); }
  size_t tensor_count() const { return stream_->tensor_count(); }
  size_t handed_over() const { return stream_->handed_over(); }
  bool committed() const { return stream_->committed(); }

 private:
  std::optional<std::chrono::nanoseconds> Remaining() const {
    if (!deadline_.has_value()) return std::nullopt;
    return std::max<std::chrono::nanoseconds>(*deadline_ - std::chrono::steady_clock::now(),
                                              std::chrono::nanoseconds(0));
  }
  std::unique_ptr<VersionStream> stream_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::optional<double> timeout_s_;
};

class PySubscriber {
 public:
  explicit PySubscriber(std::unique_ptr<Subscriber> subscriber)
      : subscriber_(std::move(subscriber)) {}

  static std::unique_ptr<PySubscriber> Local(const std::filesystem::path& store,
                                             const std::string& channel) {
    SubscriberOptions options;
    options.store = store;
    options.channel = channel;
    return std::make_unique<PySubscriber>(ValueOrThrow(Subscriber::Open(std::move(options))));
  }

  // A subscriber with its own agent: the agent joins the coordinator and maintains `store`.
  static std::unique_ptr<PySubscriber> WithAgent(
      const std::filesystem::path& store, const std::string& channel,
      const std::string& coordinator, const std::optional<std::string>& secret_file,
      const std::string& listen, const std::string& rack, const std::string& cluster,
      uint64_t node_id, uint64_t upload_limit, uint64_t download_limit, const std::string& metrics,
      const std::string& log_level, const std::string& log_file,
      std::optional<double> connect_timeout, const std::string& transport,
      const std::vector<std::string>& tensors, const std::string& ca,
      const std::string& certificate, const std::string& key) {
    SubscriberOptions options;
    options.certificates = {ca, certificate, key};
    options.store = store;
    options.channel = channel;
    options.coordinator = coordinator;
    options.secret.secret_file = secret_file.value_or("");
    options.listen = listen;
    options.transport = transport;
    options.tensors = tensors;
    options.rack = rack;
    options.cluster = cluster;
    options.node_id = node_id;
    options.upload_limit = upload_limit;
    options.download_limit = download_limit;
    options.metrics = metrics;
    options.log_level = ValueOrThrow(ParseLogLevel(log_level));
    options.log_file = log_file;
    if (auto timeout = ToDuration(connect_timeout)) options.connect_timeout = *timeout;
    Result<std::unique_ptr<Subscriber>> opened = [&] {
      py::gil_scoped_release release;  // starts the agent's threads
      return Subscriber::Open(std::move(options));
    }();
    return std::make_unique<PySubscriber>(ValueOrThrow(std::move(opened)));
  }

  // Destroyed with the GIL held; stopping the agent joins its threads.
  ~PySubscriber() {
    py::gil_scoped_release release;
    subscriber_.reset();
  }

  std::unique_ptr<PyOpenedVersion> Wait(uint64_t min_version, std::optional<double> timeout_s) {
    Result<ReceivedVersion> opened =
        WaitInSlices<ReceivedVersion>(ToDuration(timeout_s), [&](std::chrono::nanoseconds slice) {
          return subscriber_->Wait(Version(min_version), slice);
        });
    if (!opened.ok() && opened.status().code() == Code::kDeadlineExceeded) {
      std::ostringstream text;
      text << subscriber_->Describe(Version(min_version)) << " within " << *timeout_s << " s";
      Throw(DeadlineExceeded(text.str()));
    }
    return std::make_unique<PyOpenedVersion>(ValueOrThrow(std::move(opened)));
  }

  std::unique_ptr<PyVersionStream> Stream(uint64_t version, const std::vector<std::string>& order,
                                          std::optional<double> timeout_s) {
    StreamOptions options;
    options.order = order;
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (timeout_s) {
      deadline =
          std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                 std::chrono::duration<double>(*timeout_s));
    }
    // Opening waits for the version to start arriving: in slices, like every wait here.
    Result<std::unique_ptr<VersionStream>> opened = WaitInSlices<std::unique_ptr<VersionStream>>(
        ToDuration(timeout_s), [&](std::chrono::nanoseconds slice) {
          StreamOptions o = options;
          o.timeout = slice;
          return subscriber_->Stream(Version(version), std::move(o));
        });
    if (!opened.ok() && opened.status().code() == Code::kDeadlineExceeded) {
      Throw(DeadlineExceeded("v" + std::to_string(version) + " of channel " +
                             subscriber_->channel() + " did not start arriving within " +
                             std::to_string(*timeout_s) + " s"));
    }
    std::unique_ptr<VersionStream> stream = ValueOrThrow(std::move(opened));
    std::optional<double> left;
    if (deadline) {
      left = std::chrono::duration<double>(*deadline - std::chrono::steady_clock::now()).count();
    }
    return std::make_unique<PyVersionStream>(std::move(stream),
                                             left.has_value() ? left : timeout_s);
  }

  // [(tensor name, [(begin, end), ...])] of `to` against `since`.
  py::list Changed(uint64_t since, uint64_t to) {
    Result<std::vector<TensorChange>> changes = [&] {
      py::gil_scoped_release release;
      return subscriber_->Changed(Version(since), Version(to));
    }();
    py::list out;
    for (const TensorChange& c : ValueOrThrow(std::move(changes))) {
      py::list ranges;
      for (const auto& [begin, end] : c.ranges) ranges.append(py::make_tuple(begin, end));
      out.append(py::make_tuple(c.name, ranges));
    }
    return out;
  }

  // The in-process agent's progress and the store's current version; None without an agent.
  py::object Progress() {
    if (!subscriber_->has_agent()) return py::none();
    const NodeStatus s = ValueOrThrow(subscriber_->status());
    py::dict d;
    d["version"] = s.version.value();
    d["delta"] = s.delta;
    d["chunks_done"] = s.chunks_done;
    d["chunks_total"] = s.chunks_total;
    d["bytes_received"] = s.bytes_received;
    d["bytes_sent"] = s.bytes_sent;
    d["chunks_failed"] = s.chunks_failed;
    d["peers"] = s.peers;
    d["complete"] = s.complete;
    d["error"] = s.error;
    d["waiting"] = s.waiting;
    d["address"] = s.address;
    d["node_id"] = s.node_id;
    d["current_version"] = s.current_version.value();
    d["running"] = s.running;
    return d;
  }

  void ReportAttestation(uint64_t version, const std::string& digest) {
    LiveAttestation a;
    a.version = Version(version);
    a.digest = digest;
    ThrowIfError(subscriber_->ReportAttestation(a));
  }
  void SetLiveBase(uint64_t version, const std::string& digest, bool matches, bool every_tensor) {
    LiveAttestation a;
    a.version = Version(version);
    a.digest = digest;
    a.matches = matches;
    a.every_tensor = every_tensor;
    ThrowIfError(subscriber_->SetLiveBase(a));
  }
  bool has_agent() const { return subscriber_->has_agent(); }

  void Close() {
    py::gil_scoped_release release;  // joins the agent's threads
    subscriber_->Close();
  }

 private:
  std::unique_ptr<Subscriber> subscriber_;
};

}  // namespace

void RegisterSubscriber(py::module_& m) {
  py::class_<PyVersionStream>(m, "_VersionStream")
      .def("next", &PyVersionStream::Next)
      .def("wait_committed", &PyVersionStream::WaitCommitted)
      .def("files", &PyVersionStream::files)
      .def("fileno", &PyVersionStream::fileno, py::arg("index"))
      .def_property_readonly("version", &PyVersionStream::version)
      .def_property_readonly("tensor_count", &PyVersionStream::tensor_count)
      .def_property_readonly("handed_over", &PyVersionStream::handed_over)
      .def_property_readonly("committed", &PyVersionStream::committed);
  py::class_<PyOpenedVersion>(m, "_OpenedVersion")
      .def_property_readonly("channel", &PyOpenedVersion::channel)
      .def_property_readonly("version", &PyOpenedVersion::version)
      .def_property_readonly("path", &PyOpenedVersion::path)
      .def_property_readonly("root", &PyOpenedVersion::root)
      .def_property_readonly("chunk_size", &PyOpenedVersion::chunk_size)
      .def_property_readonly("total_size", &PyOpenedVersion::total_size)
      .def_property_readonly("chunk_count", &PyOpenedVersion::chunk_count)
      .def_property_readonly("metadata", &PyOpenedVersion::metadata)
      .def_property_readonly("base_version", &PyOpenedVersion::base_version)
      .def("files", &PyOpenedVersion::files)
      .def("tensors", &PyOpenedVersion::tensors)
      .def("partial", &PyOpenedVersion::partial)
      .def("fileno", &PyOpenedVersion::fileno, py::arg("index"))
      .def("close_files", &PyOpenedVersion::close_files);

  py::class_<PySubscriber>(m, "_StoreSubscriber")
      .def(py::init(&PySubscriber::Local), py::arg("store"), py::arg("channel"))
      .def("wait", &PySubscriber::Wait, py::arg("min_version") = 0, py::arg("timeout") = py::none())
      .def_static("with_agent", &PySubscriber::WithAgent, py::kw_only(), py::arg("store"),
                  py::arg("channel"), py::arg("coordinator"), py::arg("secret_file"),
                  py::arg("listen") = "127.0.0.1:0", py::arg("rack") = "",
                  py::arg("cluster") = "default", py::arg("node_id") = 0,
                  py::arg("upload_limit") = 0, py::arg("download_limit") = 0,
                  py::arg("metrics") = "", py::arg("log_level") = "warn", py::arg("log_file") = "",
                  py::arg("connect_timeout") = py::none(), py::arg("transport") = "tcp",
                  py::arg("tensors") = std::vector<std::string>{}, py::arg("ca") = "",
                  py::arg("certificate") = "", py::arg("key") = "")
      .def("changed", &PySubscriber::Changed, py::arg("since"), py::arg("to"))
      .def("status", &PySubscriber::Progress)
      .def("stream", &PySubscriber::Stream, py::arg("version"), py::arg("order"),
           py::arg("timeout") = py::none())
      .def("report_attestation", &PySubscriber::ReportAttestation, py::arg("version"),
           py::arg("digest"))
      .def("set_live_base", &PySubscriber::SetLiveBase, py::arg("version"), py::arg("digest"),
           py::arg("matches"), py::arg("every_tensor"))
      .def_property_readonly("has_agent", &PySubscriber::has_agent)
      .def("close", &PySubscriber::Close);
}

}  // namespace weightcast::python
