// Bindings of the daemon side: a Publisher that registers versions with a coordinator and seeds
// them (publish::Publisher). The tensors are written straight into the publisher's store root as
// a safetensors file, then published as a directory: no checkpoint of the trainer's own.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "bindings.h"
#include "publish/publisher.h"
#include "store/store.h"
#include "util/text.h"

namespace weightcast::python {
namespace {

py::dict ProgressDict(const agent::SwarmProgress& p) {
  py::dict out;
  out["version"] = p.version.value();
  out["delta"] = p.delta;
  out["chunks_done"] = p.chunks_done;
  out["chunks_total"] = p.chunks_total;
  out["bytes_done"] = p.bytes_done;
  out["bytes_total"] = p.bytes_total;
  out["bytes_received"] = p.bytes_received;
  out["bytes_sent"] = p.bytes_sent;
  out["chunks_failed"] = p.chunks_failed;
  out["peers"] = p.peers;
  out["complete"] = p.complete;
  out["committed"] = p.committed;
  out["error"] = p.error;
  return out;
}

class PyRemotePublisher {
 public:
  PyRemotePublisher(const std::string& coordinator, const std::string& channel,
                    const std::optional<std::string>& secret_file,
                    const std::filesystem::path& store, uint64_t chunk_size,
                    const std::string& listen, const std::string& cluster, uint64_t node_id,
                    const std::string& log_level, const std::string& log_file,
                    std::optional<double> connect_timeout) {
    publish::PublisherOptions options;
    options.log = MakeLogger("publish", log_level, log_file);
    options.coordinator = coordinator;
    options.channel = channel;
    options.secret = LoadSecret(secret_file);
    options.store = store;
    options.build.chunk_size = chunk_size;
    options.listen = listen;
    options.cluster = cluster;
    options.node_id = PeerId(node_id);
    if (auto timeout = ToDuration(connect_timeout)) options.connect_timeout = *timeout;
    store_root_ = store;
    channel_ = channel;
    Result<std::unique_ptr<publish::Publisher>> created = [&] {
      py::gil_scoped_release release;  // connects to the coordinator, with retries
      return publish::Publisher::Create(std::move(options));
    }();
    publisher_ = ValueOrThrow(std::move(created));
  }

  ~PyRemotePublisher() { Close(); }

  py::dict Publish(const py::list& tensors, const std::map<std::string, std::string>& metadata) {
    if (publisher_ == nullptr) Throw(FailedPrecondition("publisher is closed"));
    std::vector<py::buffer_info> pinned;
    std::vector<TensorBytes> items = TensorsFromPython(tensors, pinned);
    struct Out {
      publish::PublishedVersion published;
      Digest root{};
    };
    Result<Out> result = [&]() -> Result<Out> {
      py::gil_scoped_release release;
      ASSIGN_OR_RETURN(std::filesystem::path dir, PrepareScratchDir(store_root_, channel_));
      RETURN_IF_ERROR(WriteTensorsFile(dir / "model.safetensors", std::move(items)));
      auto published = publisher_->PublishDirectory(dir, metadata);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);  // imported (linked or copied) into the store
      if (!published.ok()) return published.status();
      Out out{*published, {}};
      // The root, from the manifest the publisher committed (a read-only open takes no lock).
      StoreOptions read_only;
      read_only.read_only = true;
      ASSIGN_OR_RETURN(Store store, Store::Open(store_root_, read_only));
      ASSIGN_OR_RETURN(Manifest manifest, store.GetManifest(channel_, published->version));
      out.root = manifest.root;
      return out;
    }();
    Out out = ValueOrThrow(std::move(result));
    const publish::PublishedVersion& p = out.published;
    py::dict d;
    d["version"] = p.version.value();
    d["total_bytes"] = p.model_bytes;
    d["chunk_count"] = p.chunks;
    d["root"] = ToHex(out.root);
    d["delta"] = p.delta;
    // What a node that holds the previous version receives: the payloads of a delta, or every
    // chunk of a full version.
    d["wire_bytes"] = p.delta ? p.payload_bytes : p.model_bytes;
    d["prepare_seconds"] = p.prepare_seconds;
    return d;
  }

  py::dict Progress() {
    if (publisher_ == nullptr) Throw(FailedPrecondition("publisher is closed"));
    agent::SwarmProgress progress = publisher_->progress();
    py::dict d = ProgressDict(progress);
    d["address"] = publisher_->address();
    d["node_id"] = publisher_->node_id().value();
    return d;
  }

  void WaitUntil(const std::string& until, std::optional<double> timeout_s) {
    if (publisher_ == nullptr) Throw(FailedPrecondition("publisher is closed"));
    const publish::SeedUntil target = ValueOrThrow(publish::ParseSeedUntil(until));
    const auto timeout = ToDuration(timeout_s);
    const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout
                                  : std::chrono::steady_clock::time_point::max();
    constexpr auto kSlice = std::chrono::milliseconds(200);
    while (true) {
      const auto now = std::chrono::steady_clock::now();
      const auto slice = std::min<std::chrono::nanoseconds>(
          kSlice, std::max(deadline - now, std::chrono::steady_clock::duration::zero()));
      weightcast::Status status = [&] {
        py::gil_scoped_release release;
        return publisher_->WaitUntil(target, slice);
      }();
      if (status.ok()) return;
      if (status.code() != Code::kDeadlineExceeded ||
          std::chrono::steady_clock::now() >= deadline) {
        Throw(status);
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  void Close() {
    if (publisher_ == nullptr) return;
    py::gil_scoped_release release;  // joins the publisher's threads
    publisher_->Stop();
    publisher_.reset();
  }

 private:
  std::filesystem::path store_root_;
  std::string channel_;
  std::unique_ptr<publish::Publisher> publisher_;
};

}  // namespace

void RegisterRemote(py::module_& m) {
  py::class_<PyRemotePublisher>(m, "_Publisher")
      .def(py::init<const std::string&, const std::string&, const std::optional<std::string>&,
                    const std::filesystem::path&, uint64_t, const std::string&, const std::string&,
                    uint64_t, const std::string&, const std::string&, std::optional<double>>(),
           py::kw_only(), py::arg("coordinator"), py::arg("channel"), py::arg("secret_file"),
           py::arg("store"), py::arg("chunk_size"), py::arg("listen") = "127.0.0.1:0",
           py::arg("cluster") = "default", py::arg("node_id") = 0, py::arg("log_level") = "warn",
           py::arg("log_file") = "", py::arg("connect_timeout") = py::none())
      .def("publish", &PyRemotePublisher::Publish, py::arg("tensors"), py::arg("metadata"))
      .def("status", &PyRemotePublisher::Progress)
      .def("wait_until", &PyRemotePublisher::WaitUntil, py::arg("until"),
           py::arg("timeout") = py::none())
      .def("close", &PyRemotePublisher::Close);
}

}  // namespace weightcast::python
