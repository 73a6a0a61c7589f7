// Bindings of weightcast::Publisher (<weightcast/publisher.h>): `_Publisher` and the handle of
// an asynchronous publish, `_PublishHandle`. python/weightcast/_publisher.py wraps them.
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <weightcast/publisher.h>

#include "bindings.h"

namespace weightcast::python {
namespace {

py::dict ResultDict(const PublishResult& r, bool coordinated) {
  py::dict d;
  d["version"] = r.version.value();
  d["total_bytes"] = r.total_bytes;
  d["chunk_count"] = r.chunk_count;
  d["root"] = r.root;
  d["seconds"] = r.seconds;
  if (coordinated) {
    d["delta"] = r.delta;
    d["wire_bytes"] = r.wire_bytes.value_or(0);
    d["prepare_seconds"] = r.prepare_seconds;
  }
  return d;
}

// Python objects a copy=False publish reads, released on the publisher's thread once it is done:
// with the GIL, which that thread takes for it, except while the interpreter is finalizing
// (then they are left alone; the process is exiting and taking the GIL could hang).
struct PythonBuffers {
  py::object owner;
  std::vector<py::buffer_info> pinned;
};

bool IsFinalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

std::shared_ptr<const void> KeepAlive(py::object owner, std::vector<py::buffer_info> pinned) {
  auto* buffers = new PythonBuffers{std::move(owner), std::move(pinned)};
  return std::shared_ptr<const void>(buffers, [](const void* p) {
    auto* b = static_cast<PythonBuffers*>(const_cast<void*>(p));
    if (!Py_IsInitialized() || IsFinalizing()) return;  // leaked on purpose at exit
    py::gil_scoped_acquire gil;
    delete b;
  });
}

std::string SecondsText(double seconds) {
  std::ostringstream text;
  text << seconds << " s";
  return text.str();
}

Result<bool> AsResult(const weightcast::Status& status) {
  if (status.ok()) return true;
  return status;
}

void WaitUntilIn(const std::string& until, std::optional<double> timeout_s,
                 const std::function<weightcast::Status(SeedUntil, std::chrono::nanoseconds)>& fn) {
  const SeedUntil target = ValueOrThrow(ParseSeedUntil(until));
  Result<bool> waited = WaitInSlices<bool>(
      ToDuration(timeout_s), [&](std::chrono::nanoseconds s) { return AsResult(fn(target, s)); });
  ThrowIfError(waited.status());
}

class PyPublishHandle {
 public:
  PyPublishHandle(PublishHandle handle, bool coordinated)
      : handle_(std::move(handle)), coordinated_(coordinated) {}

  bool done() const { return handle_.done(); }

  py::dict Wait(std::optional<double> timeout_s) {
    Result<PublishResult> result = WaitInSlices<PublishResult>(
        ToDuration(timeout_s), [&](std::chrono::nanoseconds slice) { return handle_.Wait(slice); });
    if (!result.ok() && result.status().code() == Code::kDeadlineExceeded && !handle_.done()) {
      Throw(DeadlineExceeded("the publish is not done within " + SecondsText(*timeout_s)));
    }
    return ResultDict(ValueOrThrow(std::move(result)), coordinated_);
  }

  void WaitUntil(const std::string& until, std::optional<double> timeout_s) {
    WaitUntilIn(until, timeout_s, [&](SeedUntil target, std::chrono::nanoseconds slice) {
      return handle_.WaitUntil(target, slice);
    });
  }

 private:
  PublishHandle handle_;
  bool coordinated_;
};

class PyPublisher {
 public:
  PyPublisher(const std::filesystem::path& store, const std::string& channel,
              const std::optional<std::string>& coordinator,
              const std::optional<std::string>& secret_file, uint64_t chunk_size,
              uint32_t keep_versions, const std::string& listen, const std::string& cluster,
              uint64_t node_id, const std::string& writer_id, bool take_over,
              const std::string& log_level, const std::string& log_file,
              std::optional<double> connect_timeout, uint32_t rank, uint32_t world,
              const std::string& transport, const std::string& ca, const std::string& certificate,
              const std::string& key, bool device_checks) {
    PublisherOptions options;
    options.device_checks = device_checks;
    options.certificates = {ca, certificate, key};
    options.rank = rank;
    options.world = world;
    options.store = store;
    options.channel = channel;
    options.coordinator = coordinator.value_or("");
    options.secret.secret_file = secret_file.value_or("");
    options.chunk_size = chunk_size;
    options.keep_versions = keep_versions;
    options.listen = listen;
    options.transport = transport;
    options.cluster = cluster;
    options.node_id = node_id;
    options.writer_id = writer_id;
    options.take_over = take_over;
    options.log_level = ValueOrThrow(ParseLogLevel(log_level));
    options.log_file = log_file;
    if (auto timeout = ToDuration(connect_timeout)) options.connect_timeout = *timeout;
    Result<std::unique_ptr<Publisher>> opened = [&] {
      py::gil_scoped_release release;  // connects to the coordinator, with retries
      return Publisher::Open(std::move(options));
    }();
    publisher_ = ValueOrThrow(std::move(opened));
    coordinated_ = publisher_->coordinated();
  }

  // Destroyed with the GIL held: let the publisher's thread take it to release Python buffers
  // while the queued publishes finish.
  ~PyPublisher() {
    std::shared_ptr<Publisher> publisher = std::move(publisher_);
    if (publisher == nullptr) return;
    py::gil_scoped_release release;
    publisher.reset();
  }

  // tensors: [(name, dtype name, shape, buffer)] (bindings.h).
  py::dict Publish(const py::list& tensors, std::optional<int64_t> step) {
    std::shared_ptr<Publisher> publisher = Open();
    std::vector<py::buffer_info> pinned;
    std::vector<TensorView> views = TensorsFromPython(tensors, pinned);
    Result<PublishResult> result = [&] {
      py::gil_scoped_release release;
      return publisher->Publish(views, step);
    }();
    return ResultDict(ValueOrThrow(std::move(result)), coordinated_);
  }

  PyPublishHandle PublishAsync(const py::list& tensors, std::optional<int64_t> step, bool copy) {
    std::shared_ptr<Publisher> publisher = Open();
    std::vector<py::buffer_info> pinned;
    std::vector<TensorView> views = TensorsFromPython(tensors, pinned);
    AsyncOptions async;
    async.copy = copy;
    if (!copy) async.keep_alive = KeepAlive(tensors, std::move(pinned));
    Result<PublishHandle> handle = [&] {
      py::gil_scoped_release release;  // the copy of a large model takes a while
      return publisher->PublishAsync(views, step, std::move(async));
    }();
    return PyPublishHandle(ValueOrThrow(std::move(handle)), coordinated_);
  }

  void Reserve(const py::list& tensors) {
    std::shared_ptr<Publisher> publisher = Open();
    std::vector<py::buffer_info> pinned;
    std::vector<TensorView> views = TensorsFromPython(tensors, pinned);
    const weightcast::Status s = [&] {
      py::gil_scoped_release release;  // makes a model's size of pages
      return publisher->Reserve(views);
    }();
    ThrowIfError(s);
  }

  py::dict Status() {
    const NodeStatus s = ValueOrThrow(Open()->status());
    py::dict d;
    d["version"] = s.version.value();
    d["delta"] = s.delta;
    d["chunks_done"] = s.chunks_done;
    d["chunks_total"] = s.chunks_total;
    d["bytes_done"] = s.bytes_done;
    d["bytes_total"] = s.bytes_total;
    d["bytes_received"] = s.bytes_received;
    d["bytes_sent"] = s.bytes_sent;
    d["chunks_failed"] = s.chunks_failed;
    d["peers"] = s.peers;
    d["complete"] = s.complete;
    d["committed"] = s.committed;
    d["error"] = s.error;
    d["address"] = s.address;
    d["node_id"] = s.node_id;
    return d;
  }

  void WaitUntil(const std::string& until, std::optional<double> timeout_s) {
    std::shared_ptr<Publisher> publisher = Open();
    WaitUntilIn(until, timeout_s, [&](SeedUntil target, std::chrono::nanoseconds slice) {
      return publisher->WaitUntil(target, slice);
    });
  }

  void Close(bool abort_pending) {
    std::shared_ptr<Publisher> publisher = std::move(publisher_);
    if (publisher == nullptr) return;
    py::gil_scoped_release release;  // waits for the queue and joins the publisher's threads
    publisher->Close(abort_pending ? PendingPublishes::kAbort : PendingPublishes::kFinish);
    publisher.reset();
  }

 private:
  // A reference for the call, so that close() from another thread cannot destroy the publisher
  // under it (it fails the call with the publisher's own "closed" error instead).
  std::shared_ptr<Publisher> Open() {
    if (publisher_ == nullptr) Throw(FailedPrecondition("publisher is closed"));
    return publisher_;
  }

  std::shared_ptr<Publisher> publisher_;
  bool coordinated_ = false;
};

}  // namespace

void RegisterPublisher(py::module_& m) {
  py::class_<PyPublishHandle>(m, "_PublishHandle")
      .def("done", &PyPublishHandle::done)
      .def("wait", &PyPublishHandle::Wait, py::arg("timeout") = py::none())
      .def("wait_until", &PyPublishHandle::WaitUntil, py::arg("until"),
           py::arg("timeout") = py::none());

  py::class_<PyPublisher>(m, "_Publisher")
      .def(py::init<const std::filesystem::path&, const std::string&,
                    const std::optional<std::string>&, const std::optional<std::string>&, uint64_t,
                    uint32_t, const std::string&, const std::string&, uint64_t, const std::string&,
                    bool, const std::string&, const std::string&, std::optional<double>, uint32_t,
                    uint32_t, const std::string&, const std::string&, const std::string&,
                    const std::string&, bool>(),
           py::kw_only(), py::arg("store"), py::arg("channel"), py::arg("coordinator") = py::none(),
           py::arg("secret_file") = py::none(), py::arg("chunk_size"), py::arg("keep_versions") = 2,
           py::arg("listen") = "127.0.0.1:0", py::arg("cluster") = "default",
           py::arg("node_id") = 0, py::arg("writer_id") = "", py::arg("take_over") = false,
           py::arg("log_level") = "warn", py::arg("log_file") = "",
           py::arg("connect_timeout") = py::none(), py::arg("rank") = 0, py::arg("world") = 1,
           py::arg("transport") = "tcp", py::arg("ca") = "", py::arg("certificate") = "",
           py::arg("key") = "", py::arg("device_checks") = false)
      .def("publish", &PyPublisher::Publish, py::arg("tensors"), py::arg("step") = py::none())
      .def("publish_async", &PyPublisher::PublishAsync, py::arg("tensors"),
           py::arg("step") = py::none(), py::arg("copy") = true)
      .def("reserve", &PyPublisher::Reserve, py::arg("tensors"))
      .def("status", &PyPublisher::Status)
      .def("wait_until", &PyPublisher::WaitUntil, py::arg("until"), py::arg("timeout") = py::none())
      .def("close", &PyPublisher::Close, py::arg("abort_pending") = false);
}

}  // namespace weightcast::python
