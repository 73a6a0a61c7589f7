// The `_weightcast` extension: thin bindings over subscriber.h and tensor_writer.h. The Python
// package (python/weightcast/) builds the user-facing classes on top of these.
//
// Conventions: every C++ Status that is not OK becomes a Python exception of the class for its
// code (weightcast.Error and subclasses), carrying the C++ message. The GIL is released around
// anything that waits or does I/O; waits are sliced so Ctrl-C still interrupts them.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agent_runner.h"
#include "bindings.h"
#include "manifest/builder.h"
#include "subscriber.h"
#include "tensor_writer.h"
#include "util/text.h"

namespace weightcast::python {
namespace {

// What Python sees of an OpenedVersion: plain data plus the open descriptors (Python maps them).
class PyOpenedVersion {
 public:
  explicit PyOpenedVersion(OpenedVersion opened) : opened_(std::move(opened)) {}

  const std::string& channel() const { return opened_.channel; }
  uint64_t version() const { return opened_.version.value(); }
  std::string path() const { return opened_.dir.string(); }
  std::string root() const { return ToHex(opened_.manifest->root); }
  uint64_t chunk_size() const { return opened_.manifest->chunk_size; }
  uint64_t total_size() const { return opened_.manifest->total_size(); }
  uint32_t chunk_count() const { return opened_.manifest->chunk_count(); }
  const std::map<std::string, std::string>& metadata() const { return opened_.manifest->metadata; }
  std::optional<uint64_t> base_version() const {
    if (!opened_.manifest->delta) return std::nullopt;
    return opened_.manifest->delta->base_version.value();
  }

  // [(relative path, size)], in manifest order.
  py::list files() const {
    py::list out;
    for (const ManifestFile& f : opened_.manifest->files)
      out.append(py::make_tuple(f.path, f.size));
    return out;
  }
  // [(name, dtype, shape, file index, offset in the file, byte size)], in offset order.
  py::list tensors() const {
    py::list out;
    const Manifest& m = *opened_.manifest;
    for (const ManifestTensor& t : m.tensors) {
      py::tuple shape(t.shape.size());
      for (size_t i = 0; i < t.shape.size(); ++i) shape[i] = py::int_(t.shape[i]);
      const uint64_t file_offset = t.offset - m.files.at(t.file_index).offset;
      out.append(py::make_tuple(t.name, std::string(DTypeName(t.dtype)), shape, t.file_index,
                                file_offset, t.size));
    }
    return out;
  }
  int fileno(size_t index) const {
    if (index >= opened_.files.size() || opened_.files[index].get() < 0) {
      Throw(FailedPrecondition("file " + std::to_string(index) + " of version " +
                               std::to_string(version()) + " is not open"));
    }
    return opened_.files[index].get();
  }
  // Python has mapped what it needs; the mappings hold their own descriptors.
  void close_files() { opened_.files.clear(); }

 private:
  OpenedVersion opened_;
};

class PySubscriber {
 public:
  PySubscriber(const std::filesystem::path& store, const std::string& channel)
      : follower_(ValueOrThrow(StoreFollower::Create(store, channel))) {}

  // A subscriber with its own agent: the agent joins the coordinator and maintains `store`; the
  // follower reads what it commits.
  static std::unique_ptr<PySubscriber> WithAgent(
      const std::filesystem::path& store, const std::string& channel,
      const std::string& coordinator, const std::optional<std::string>& secret_file,
      const std::string& listen, const std::string& rack, const std::string& cluster,
      uint64_t node_id, uint64_t upload_limit, uint64_t download_limit, const std::string& metrics,
      const std::string& log_level, const std::string& log_file) {
    auto subscriber = std::make_unique<PySubscriber>(store, channel);
    agent::AgentOptions options;
    options.coordinator = coordinator;
    options.store_dir = store.string();
    options.channel = channel;
    options.listen = listen;
    options.rack = rack;
    options.metrics = metrics;
    options.upload_limit = upload_limit;
    options.download_limit = download_limit;
    options.secret = LoadSecret(secret_file);
    options.cluster = cluster;
    options.node_id = PeerId(node_id);
    options.log = MakeLogger("agent", log_level, log_file).AsLineFn();
    StoreFollower* follower = subscriber->follower_.get();
    // A dead agent wakes a blocked wait(), which then raises the agent's error.
    subscriber->agent_ =
        ValueOrThrow(AgentRunner::Start(std::move(options), [follower] { follower->Close(); }));
    return subscriber;
  }

  std::unique_ptr<PyOpenedVersion> Wait(uint64_t min_version, std::optional<double> timeout_s) {
    const auto timeout = ToDuration(timeout_s);
    const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout
                                  : std::chrono::steady_clock::time_point::max();
    // Slices short enough that Ctrl-C (checked between slices, with the GIL) feels immediate.
    constexpr auto kSlice = std::chrono::milliseconds(200);
    while (true) {
      ThrowIfAgentExited();
      const auto now = std::chrono::steady_clock::now();
      const auto slice =
          deadline == std::chrono::steady_clock::time_point::max()
              ? std::chrono::nanoseconds(kSlice)
              : std::min<std::chrono::nanoseconds>(
                    kSlice, std::max(deadline - now, std::chrono::steady_clock::duration::zero()));
      Result<OpenedVersion> opened = [&] {
        py::gil_scoped_release release;
        return follower_->Wait(Version(min_version), slice);
      }();
      if (opened.ok()) return std::make_unique<PyOpenedVersion>(std::move(opened).value());
      if (opened.status().code() == Code::kAborted) ThrowIfAgentExited();
      if (opened.status().code() != Code::kDeadlineExceeded) Throw(opened.status());
      if (std::chrono::steady_clock::now() >= deadline) {
        std::ostringstream text;
        text << follower_->Describe(Version(min_version)) << " within " << *timeout_s << " s";
        Throw(DeadlineExceeded(text.str()));
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  // [(tensor name, [(begin, end), ...])] of `to` against `since`.
  py::list Changed(uint64_t since, uint64_t to) {
    std::shared_ptr<const Manifest> from = ValueOrThrow(follower_->ManifestOf(Version(since)));
    std::shared_ptr<const Manifest> target = ValueOrThrow(follower_->ManifestOf(Version(to)));
    std::vector<TensorChange> changes;
    {
      py::gil_scoped_release release;
      changes = ChangedTensors(*from, *target);
    }
    py::list out;
    for (const TensorChange& c : changes) {
      py::list ranges;
      for (const auto& [begin, end] : c.ranges) ranges.append(py::make_tuple(begin, end));
      out.append(py::make_tuple(c.name, ranges));
    }
    return out;
  }

  // The in-process agent's progress and the store's current version; None without an agent.
  py::object Progress() {
    if (agent_ == nullptr) return py::none();
    const agent::SwarmProgress p = agent_->progress();
    py::dict d;
    d["version"] = p.version.value();
    d["delta"] = p.delta;
    d["chunks_done"] = p.chunks_done;
    d["chunks_total"] = p.chunks_total;
    d["bytes_received"] = p.bytes_received;
    d["bytes_sent"] = p.bytes_sent;
    d["chunks_failed"] = p.chunks_failed;
    d["peers"] = p.peers;
    d["complete"] = p.complete;
    d["error"] = p.error;
    d["address"] = agent_->address();
    d["node_id"] = agent_->id().value();
    Result<Version> current = follower_->Current();
    d["current_version"] = current.ok() ? current->value() : 0;
    d["running"] = !agent_->exited();
    return d;
  }

  void Close() {
    follower_->Close();
    if (agent_ != nullptr) {
      py::gil_scoped_release release;  // joins the agent's threads
      agent_->Stop();
    }
  }

 private:
  void ThrowIfAgentExited() {
    if (agent_ == nullptr || !agent_->exited()) return;
    const weightcast::Status failure = agent_->failure();
    if (!failure.ok()) Throw(failure.WithContext("in-process agent"));
    Throw(Aborted("the in-process agent stopped"));
  }

  std::unique_ptr<StoreFollower> follower_;
  std::unique_ptr<AgentRunner> agent_;  // destroyed (stopped) before the follower it closes
};

// A publisher without a coordinator: commits each step into a store on this machine.
class PyLocalPublisher {
 public:
  PyLocalPublisher(const std::filesystem::path& store, const std::string& channel,
                   uint64_t chunk_size, uint32_t keep_versions)
      : channel_(channel), chunk_size_(chunk_size) {
    ThrowIfError(ValidateChannelName(channel));
    // Checked here as well as by the manifest builder, so a bad value fails at construction
    // rather than at the first publish.
    if (chunk_size < kMinChunkSize || chunk_size > kMaxChunkSize) {
      Throw(InvalidArgument("chunk_size " + std::to_string(chunk_size) + " is outside [" +
                            std::to_string(kMinChunkSize) + ", " + std::to_string(kMaxChunkSize) +
                            "]"));
    }
    StoreOptions options;
    options.keep_versions = keep_versions;
    store_ = std::make_unique<Store>(ValueOrThrow(Store::Open(store, options)));
  }

  // tensors: [(name, dtype name, shape, buffer)] (bindings.h).
  py::dict Publish(const py::list& tensors, const std::map<std::string, std::string>& metadata) {
    if (store_ == nullptr) Throw(FailedPrecondition("publisher is closed"));
    std::vector<py::buffer_info> pinned;
    std::vector<TensorBytes> items = TensorsFromPython(tensors, pinned);
    Result<LocalPublishResult> result = [&]() -> Result<LocalPublishResult> {
      py::gil_scoped_release release;
      ASSIGN_OR_RETURN(std::filesystem::path dir, PrepareScratchDir(store_->root(), channel_));
      RETURN_IF_ERROR(WriteTensorsFile(dir / "model.safetensors", std::move(items)));
      return CommitDirectory(*store_, channel_, dir, chunk_size_, metadata);
    }();
    LocalPublishResult r = ValueOrThrow(std::move(result));
    py::dict out;
    out["version"] = r.version.value();
    out["total_bytes"] = r.total_bytes;
    out["chunk_count"] = r.chunk_count;
    out["root"] = ToHex(r.root);
    out["delta"] = r.delta;
    out["wire_bytes"] = r.wire_bytes;
    out["seconds"] = r.seconds;
    return out;
  }

  void Close() { store_.reset(); }

 private:
  std::string channel_;
  uint64_t chunk_size_;
  std::unique_ptr<Store> store_;
};

}  // namespace
}  // namespace weightcast::python

PYBIND11_MODULE(_weightcast, m) {
  using namespace weightcast::python;
  m.doc() = "weightcast C++ core (use the `weightcast` package, not this module directly)";
  RegisterErrors(m);
  RegisterRemote(m);
  RegisterLive(m);
  m.attr("DEFAULT_CHUNK_SIZE") = weightcast::kDefaultChunkSize;
  m.attr("MIN_CHUNK_SIZE") = weightcast::kMinChunkSize;
  m.attr("MAX_CHUNK_SIZE") = weightcast::kMaxChunkSize;

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
      .def("fileno", &PyOpenedVersion::fileno, py::arg("index"))
      .def("close_files", &PyOpenedVersion::close_files);

  py::class_<PySubscriber>(m, "_StoreSubscriber")
      .def(py::init<const std::filesystem::path&, const std::string&>(), py::arg("store"),
           py::arg("channel"))
      .def("wait", &PySubscriber::Wait, py::arg("min_version") = 0, py::arg("timeout") = py::none())
      .def_static("with_agent", &PySubscriber::WithAgent, py::kw_only(), py::arg("store"),
                  py::arg("channel"), py::arg("coordinator"), py::arg("secret_file"),
                  py::arg("listen") = "127.0.0.1:0", py::arg("rack") = "",
                  py::arg("cluster") = "default", py::arg("node_id") = 0,
                  py::arg("upload_limit") = 0, py::arg("download_limit") = 0,
                  py::arg("metrics") = "", py::arg("log_level") = "warn", py::arg("log_file") = "")
      .def("changed", &PySubscriber::Changed, py::arg("since"), py::arg("to"))
      .def("status", &PySubscriber::Progress)
      .def("close", &PySubscriber::Close);

  py::class_<PyLocalPublisher>(m, "_LocalPublisher")
      .def(py::init<const std::filesystem::path&, const std::string&, uint64_t, uint32_t>(),
           py::arg("store"), py::arg("channel"), py::arg("chunk_size"),
           py::arg("keep_versions") = 2)
      .def("publish", &PyLocalPublisher::Publish, py::arg("tensors"), py::arg("metadata"))
      .def("close", &PyLocalPublisher::Close);

  // The CLI's size rules ("1MiB", "64KiB", "4096"), so chunk_size= and the rate limits read
  // sizes exactly as --chunk-size and --upload-limit do.
  m.def(
      "_parse_size",
      [](const std::string& text) { return ValueOrThrow(weightcast::ParseSize(text)); },
      py::arg("text"));
  m.def(
      "_dtype_bits",
      [](const std::string& name) {
        return weightcast::DTypeBits(ValueOrThrow(weightcast::ParseDType(name)));
      },
      py::arg("dtype"));
}
