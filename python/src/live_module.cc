// Binding of <weightcast/live.h>: a sampler's live tensors updated in place from a store on this
// machine. python/weightcast/_live.py is the user-facing side (torch/numpy tensors, flip).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <weightcast/live.h>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "bindings.h"

namespace weightcast::python {
namespace {

namespace py = pybind11;

// A DeviceMemory whose calls go to a Python object (weightcast._device.TorchDevice: torch
// operations on the tensors' device). The apply runs with the GIL released; each call takes it.
// Host bytes pass as memoryviews of memory valid only during the call (no copy); a Python error
// becomes the status that fails the apply.
class PyDeviceMemory final : public DeviceMemory {
 public:
  explicit PyDeviceMemory(py::object device) : device_(std::move(device)) {}
  ~PyDeviceMemory() override {
    const py::gil_scoped_acquire gil;
    device_ = py::object();
  }

  Status Write(uint64_t address, std::span<const uint8_t> from) override {
    return Call([&] { device_.attr("write")(address, View(from)); });
  }
  Status Read(uint64_t address, std::span<uint8_t> to) override {
    return Call([&] {
      device_.attr("read")(address, py::memoryview::from_memory(to.data(), to.size(), false));
    });
  }
  Status Copy(uint64_t to, uint64_t from, uint64_t size) override {
    return Call([&] { device_.attr("copy")(to, from, size); });
  }
  Status Change(uint64_t address, uint8_t width, bool add, std::span<const uint64_t> offsets,
                std::span<const uint8_t> values) override {
    return Call([&] {
      device_.attr("change")(address, width, add,
                             View({reinterpret_cast<const uint8_t*>(offsets.data()),
                                   offsets.size() * sizeof(uint64_t)}),
                             View(values));
    });
  }
  Status XorBytes(uint64_t address, std::span<const uint8_t> bytes) override {
    return Call([&] { device_.attr("xor_bytes")(address, View(bytes)); });
  }
  Result<Sums> WeightedSums(uint64_t address, uint64_t size) override {
    Sums out;
    WC_RETURN_IF_ERROR(Call([&] {
      const auto pair = device_.attr("weighted_sums")(address, size).cast<py::tuple>();
      out.a = pair[0].cast<uint64_t>();
      out.b = pair[1].cast<uint64_t>();
    }));
    return out;
  }

 private:
  // Marked writable only so that torch.from_numpy takes it without a warning; TorchDevice
  // never writes into host bytes it is given.
  static py::memoryview View(std::span<const uint8_t> bytes) {
    return py::memoryview::from_memory(const_cast<uint8_t*>(bytes.data()),
                                       static_cast<py::ssize_t>(bytes.size()), false);
  }
  template <typename F>
  Status Call(F&& f) {
    const py::gil_scoped_acquire gil;
    try {
      f();
      return Status::Ok();
    } catch (py::error_already_set& e) {
      return Internal("device memory: " + std::string(e.what()));
    } catch (const py::cast_error& e) {
      return Internal("device memory: " + std::string(e.what()));
    }
  }

  py::object device_;
};

py::dict AttestationDict(const LiveAttestation& a) {
  py::dict out;
  out["version"] = a.version.value();
  out["digest"] = a.digest;
  out["matches"] = a.matches;
  out["every_tensor"] = a.every_tensor;
  out["seconds"] = a.seconds;
  return out;
}

class PyLiveTensors {
 public:
  // `tensors`: (name, safetensors dtype, shape, address, size in bytes) of memory the Python side
  // keeps alive (_live.py holds the tensors) and writable. With `device`, the addresses are in
  // device memory that object reaches (PyDeviceMemory).
  explicit PyLiveTensors(const py::list& tensors, const py::object& device) {
    std::vector<LiveTensorView> views;
    for (const py::handle item : tensors) {
      const auto t = item.cast<py::tuple>();
      LiveTensorView v;
      v.name = t[0].cast<std::string>();
      v.dtype = t[1].cast<std::string>();
      v.shape = t[2].cast<std::vector<uint64_t>>();
      v.data = reinterpret_cast<void*>(t[3].cast<uintptr_t>());
      v.size = t[4].cast<uint64_t>();
      views.push_back(std::move(v));
    }
    std::shared_ptr<DeviceMemory> memory;
    if (!device.is_none()) memory = std::make_shared<PyDeviceMemory>(device);
    live_ = ValueOrThrow(LiveTensors::Register(std::move(views), std::move(memory)));
  }

  // `catch_up_from`: the flip's other copy (LiveTensors::ApplyFromStore), or None.
  py::dict ApplyFromStore(const std::filesystem::path& store, const std::string& channel,
                          uint64_t version, bool memory, PyLiveTensors* catch_up_from) {
    if (catch_up_from == this) catch_up_from = nullptr;
    if (memory && catch_up_from != nullptr) {
      throw py::value_error("a memory channel's versions are copied: no catch_up_from");
    }
    Result<LiveApplyReport> r = Internal("not run");
    {
      py::gil_scoped_release release;
      if (memory) {
        const std::lock_guard lock(mu_);
        r = live_->ApplyFromMemory(store, channel, Version(version));
      } else if (catch_up_from == nullptr) {
        const std::lock_guard lock(mu_);
        r = live_->ApplyFromStore(store, channel, Version(version));
      } else {
        const std::scoped_lock lock(mu_, catch_up_from->mu_);
        r = live_->ApplyFromStore(store, channel, Version(version), catch_up_from->live_.get());
      }
    }
    const LiveApplyReport& x = ValueOrThrow(std::move(r));
    py::dict out;
    out["from_version"] = x.from.value();
    out["version"] = x.to.value();
    out["delta"] = x.delta;
    out["chunks_patched"] = x.chunks_patched;
    out["chunks_copied"] = x.chunks_copied;
    out["chunks_unchanged"] = x.chunks_unchanged;
    out["chunks_repaired"] = x.chunks_repaired;
    out["payload_bytes"] = x.payload_bytes;
    out["copied_bytes"] = x.copied_bytes;
    out["caught_up"] = x.caught_up;
    out["check"] = x.check;
    out["apply_seconds"] = x.seconds;
    out["note"] = x.note;
    if (x.attestation.has_value()) {
      out["attestation"] = AttestationDict(*x.attestation);
    } else {
      out["attestation"] = py::none();
    }
    return out;
  }

  py::dict Attest(const std::filesystem::path& store, const std::string& channel) {
    Result<LiveAttestation> r = Internal("not run");
    {
      py::gil_scoped_release release;
      const std::lock_guard lock(mu_);
      r = live_->Attest(store, channel);
    }
    return AttestationDict(ValueOrThrow(std::move(r)));
  }

  void CopyFrom(PyLiveTensors& other) {
    if (&other == this) return;
    Status s;
    {
      py::gil_scoped_release release;
      const std::scoped_lock lock(mu_, other.mu_);
      s = live_->CopyFrom(*other.live_);
    }
    ThrowIfError(s);
  }

  uint64_t version() {
    const std::lock_guard lock(mu_);
    return live_->version().value();
  }

 private:
  std::mutex mu_;
  std::unique_ptr<LiveTensors> live_;
};

py::dict ToDict(const MemoryPublishResult& r) {
  py::dict out;
  out["version"] = r.version.value();
  out["delta"] = r.delta;
  out["total_bytes"] = r.total_bytes;
  out["wire_bytes"] = r.payload_bytes;
  out["chunk_count"] = r.chunk_count;
  out["root"] = r.root;
  out["snapshot_seconds"] = r.snapshot_seconds;
  out["encode_seconds"] = r.encode_seconds;
  out["publish_seconds"] = r.publish_seconds;
  return out;
}

// One publish_async of a memory channel: its result once the background finish is done.
struct PendingPublish {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<MemoryPublishResult>> result;

  bool Done() {
    const std::lock_guard lock(mu);
    return result.has_value();
  }
  // The result (raises its error); DeadlineExceededError when `timeout` passes first.
  py::dict Wait(std::optional<double> timeout) {
    bool ready = false;
    {
      py::gil_scoped_release release;
      std::unique_lock lock(mu);
      const auto has = [&] { return result.has_value(); };
      if (timeout) {
        ready = cv.wait_for(lock, std::chrono::duration<double>(*timeout), has);
      } else {
        cv.wait(lock, has);
        ready = true;
      }
    }
    if (!ready) Throw(DeadlineExceeded("publish not finished within the timeout"));
    Result<MemoryPublishResult> r = *result;
    return ToDict(ValueOrThrow(std::move(r)));
  }
};

// A memory channel's publisher. publish_async snapshots in the caller's thread (GIL released)
// and finishes on a background thread; the next publish waits for that finish.
class PyMemoryPublisher {
 public:
  PyMemoryPublisher(const std::filesystem::path& dir, const std::string& channel,
                    uint64_t chunk_size, size_t threads, bool sha256, bool deltas) {
    MemoryPublisherOptions o;
    o.deltas = deltas;
    o.chunk_size = chunk_size;
    o.threads = threads;
    o.sha256 = sha256;
    publisher_ = ValueOrThrow(MemoryPublisher::Open(dir, channel, o));
  }
  ~PyMemoryPublisher() {
    if (finisher_.joinable()) finisher_.join();
  }

  py::dict Publish(const py::list& tensors, std::optional<int64_t> step) {
    Join();
    ThrowIfClosed();
    std::vector<py::buffer_info> pinned;
    std::vector<TensorView> views = TensorsFromPython(tensors, pinned);
    Result<MemoryPublishResult> r = Internal("not run");
    {
      py::gil_scoped_release release;
      r = publisher_->Publish(views, step);
    }
    return ToDict(ValueOrThrow(std::move(r)));
  }

  void Reserve(const py::list& tensors) {
    ThrowIfClosed();
    std::vector<py::buffer_info> pinned;
    std::vector<TensorView> views = TensorsFromPython(tensors, pinned);
    Status s;
    {
      py::gil_scoped_release release;
      s = publisher_->Reserve(views);
    }
    ThrowIfError(s);
  }

  // Returns once the tensors are copied into the free slot; the finish runs on a thread.
  std::shared_ptr<PendingPublish> PublishAsync(const py::list& tensors,
                                               std::optional<int64_t> step) {
    Join();
    ThrowIfClosed();
    std::vector<py::buffer_info> pinned;
    std::vector<TensorView> views = TensorsFromPython(tensors, pinned);
    Status s;
    {
      py::gil_scoped_release release;
      s = publisher_->Snapshot(views, step);
    }
    ThrowIfError(s);
    auto state = std::make_shared<PendingPublish>();
    MemoryPublisher* publisher = publisher_.get();
    finisher_ = std::thread([publisher, state] {
      Result<MemoryPublishResult> r = publisher->Finish();
      const std::lock_guard lock(state->mu);
      state->result = std::move(r);
      state->cv.notify_all();
    });
    return state;
  }

  // Waits for the pending finish, then lets the channel go (its one-writer lock with it).
  void Close() {
    Join();
    publisher_.reset();
  }

 private:
  void ThrowIfClosed() const {
    if (publisher_ == nullptr) ThrowIfError(FailedPrecondition("the publisher is closed"));
  }
  void Join() {
    if (finisher_.joinable()) {
      py::gil_scoped_release release;
      finisher_.join();
    }
  }
  std::unique_ptr<MemoryPublisher> publisher_;
  std::thread finisher_;
};

}  // namespace

void RegisterLive(py::module_& m) {
  py::class_<PyLiveTensors>(m, "_LiveTensors")
      .def(py::init<const py::list&, const py::object&>(), py::arg("tensors"),
           py::arg("device") = py::none())
      .def("apply_from_store", &PyLiveTensors::ApplyFromStore, py::arg("store"), py::arg("channel"),
           py::arg("version"), py::arg("memory") = false,
           py::arg("catch_up_from") = static_cast<PyLiveTensors*>(nullptr))
      .def("attest", &PyLiveTensors::Attest, py::arg("store"), py::arg("channel"))
      .def("copy_from", &PyLiveTensors::CopyFrom, py::arg("other"))
      .def_property_readonly("version", &PyLiveTensors::version);
  py::class_<PyMemoryPublisher>(m, "_MemoryPublisher")
      .def(py::init<const std::filesystem::path&, const std::string&, uint64_t, size_t, bool,
                    bool>(),
           py::arg("dir"), py::arg("channel"), py::arg("chunk_size"), py::arg("threads") = 0,
           py::arg("sha256") = false, py::arg("deltas") = false)
      .def("publish", &PyMemoryPublisher::Publish, py::arg("tensors"), py::arg("step"))
      .def("publish_async", &PyMemoryPublisher::PublishAsync, py::arg("tensors"), py::arg("step"))
      .def("reserve", &PyMemoryPublisher::Reserve, py::arg("tensors"))
      .def("close", &PyMemoryPublisher::Close);
  py::class_<PendingPublish, std::shared_ptr<PendingPublish>>(m, "_MemoryPublishHandle")
      .def("done", &PendingPublish::Done)
      .def("wait", &PendingPublish::Wait, py::arg("timeout") = py::none());
  m.def(
      "_wait_memory",
      [](const std::filesystem::path& dir, const std::string& channel, uint64_t min_version,
         std::optional<double> timeout) {
        Result<Version> v = Internal("not run");
        {
          py::gil_scoped_release release;
          v = WaitMemoryVersion(dir, channel, Version(min_version), timeout);
        }
        return ValueOrThrow(std::move(v)).value();
      },
      py::arg("dir"), py::arg("channel"), py::arg("min_version"), py::arg("timeout"));
}

}  // namespace weightcast::python
