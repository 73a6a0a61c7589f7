// Binding of <weightcast/live.h>: a sampler's live tensors updated in place from a store on this
// machine. python/weightcast/_live.py is the user-facing side (torch/numpy tensors, flip).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <weightcast/live.h>
#include <memory>
#include <mutex>

#include "bindings.h"

namespace weightcast::python {
namespace {

namespace py = pybind11;

class PyLiveTensors {
 public:
  // `tensors`: (name, safetensors dtype, shape, address, size in bytes) of memory the Python side
  // keeps alive (_live.py holds the tensors) and writable.
  explicit PyLiveTensors(const py::list& tensors) {
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
    live_ = ValueOrThrow(LiveTensors::Register(std::move(views)));
  }

  py::dict ApplyFromStore(const std::filesystem::path& store, const std::string& channel,
                          uint64_t version) {
    Result<LiveApplyReport> r = Internal("not run");
    {
      py::gil_scoped_release release;
      const std::lock_guard lock(mu_);
      r = live_->ApplyFromStore(store, channel, Version(version));
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
    out["apply_seconds"] = x.seconds;
    out["note"] = x.note;
    return out;
  }

  uint64_t version() {
    const std::lock_guard lock(mu_);
    return live_->version().value();
  }

 private:
  std::mutex mu_;
  std::unique_ptr<LiveTensors> live_;
};

}  // namespace

void RegisterLive(py::module_& m) {
  py::class_<PyLiveTensors>(m, "_LiveTensors")
      .def(py::init<const py::list&>(), py::arg("tensors"))
      .def("apply_from_store", &PyLiveTensors::ApplyFromStore, py::arg("store"), py::arg("channel"),
           py::arg("version"))
      .def_property_readonly("version", &PyLiveTensors::version);
}

}  // namespace weightcast::python
