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

#include "manifest/builder.h"
#include "subscriber.h"
#include "tensor_writer.h"
#include "util/text.h"

namespace py = pybind11;

namespace weightcast::python {
namespace {

// Exception classes, one per Code, created at import. Held for the life of the interpreter.
std::map<Code, PyObject*>& ErrorClasses() {
  static auto* classes = new std::map<Code, PyObject*>();
  return *classes;
}
PyObject* g_error_base = nullptr;

[[noreturn]] void Throw(const Status& status) {
  auto it = ErrorClasses().find(status.code());
  PyObject* cls = it != ErrorClasses().end() ? it->second : g_error_base;
  PyErr_SetString(cls, status.message().c_str());
  throw py::error_already_set();
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) Throw(result.status());
  return std::move(result).value();
}

void ThrowIfError(const Status& status) {
  if (!status.ok()) Throw(status);
}

void RegisterErrors(py::module_& m) {
  g_error_base = PyErr_NewExceptionWithDoc(
      "weightcast.Error",
      "Base class of every error weightcast raises. `code` names the C++ status code.",
      PyExc_Exception, nullptr);
  if (g_error_base == nullptr) throw py::error_already_set();
  PyObject_SetAttrString(g_error_base, "code", py::str("UNKNOWN").ptr());
  m.add_object("Error", py::handle(g_error_base));

  struct Entry {
    Code code;
    const char* name;
    PyObject* extra_base;  // a builtin class the error also is, so generic handlers catch it
  };
  const Entry entries[] = {
      {Code::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {Code::kNotFound, "NotFoundError", nullptr},
      {Code::kAlreadyExists, "AlreadyExistsError", nullptr},
      {Code::kCorrupt, "CorruptError", nullptr},
      {Code::kIoError, "IoError", PyExc_OSError},
      {Code::kFailedPrecondition, "FailedPreconditionError", nullptr},
      {Code::kOutOfRange, "OutOfRangeError", PyExc_ValueError},
      {Code::kUnauthenticated, "UnauthenticatedError", nullptr},
      {Code::kUnavailable, "UnavailableError", nullptr},
      {Code::kDeadlineExceeded, "DeadlineExceededError", PyExc_TimeoutError},
      {Code::kAborted, "AbortedError", nullptr},
      {Code::kResourceExhausted, "ResourceExhaustedError", nullptr},
      {Code::kInternal, "InternalError", nullptr},
  };
  for (const Entry& e : entries) {
    py::tuple bases = e.extra_base != nullptr
                          ? py::make_tuple(py::handle(g_error_base), py::handle(e.extra_base))
                          : py::make_tuple(py::handle(g_error_base));
    const std::string qualified = std::string("weightcast.") + e.name;
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    PyObject_SetAttrString(cls, "code", py::str(std::string(CodeName(e.code))).ptr());
    ErrorClasses()[e.code] = cls;
    m.add_object(e.name, py::handle(cls));
  }
}

std::optional<std::chrono::nanoseconds> ToDuration(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  if (!std::isfinite(*seconds) || *seconds < 0) {
    Throw(InvalidArgument("timeout must be a finite number of seconds >= 0, not " +
                          std::to_string(*seconds)));
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(*seconds * 1e9));
}

Result<DType> DTypeFromName(const std::string& name) { return ParseDType(name); }

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

  std::unique_ptr<PyOpenedVersion> Wait(uint64_t min_version, std::optional<double> timeout_s) {
    const auto timeout = ToDuration(timeout_s);
    const auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout
                                  : std::chrono::steady_clock::time_point::max();
    // Slices short enough that Ctrl-C (checked between slices, with the GIL) feels immediate.
    constexpr auto kSlice = std::chrono::milliseconds(200);
    while (true) {
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

  void Close() { follower_->Close(); }

 private:
  std::unique_ptr<StoreFollower> follower_;
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

  // tensors: [(name, dtype name, shape, buffer)]; the buffers must be C-contiguous.
  py::dict Publish(const py::list& tensors, const std::map<std::string, std::string>& metadata) {
    if (store_ == nullptr) Throw(FailedPrecondition("publisher is closed"));
    std::vector<py::buffer_info> buffers;  // pin the memory while the GIL is released
    std::vector<TensorBytes> items;
    buffers.reserve(tensors.size());
    items.reserve(tensors.size());
    for (const py::handle item : tensors) {
      auto tuple = item.cast<py::tuple>();
      TensorBytes t;
      t.name = tuple[0].cast<std::string>();
      t.dtype = ValueOrThrow(DTypeFromName(tuple[1].cast<std::string>()));
      t.shape = tuple[2].cast<std::vector<uint64_t>>();
      buffers.push_back(tuple[3].cast<py::buffer>().request());
      const py::buffer_info& info = buffers.back();
      if (!IsCContiguous(info)) {
        Throw(InvalidArgument("tensor " + t.name + " is not C-contiguous"));
      }
      t.bytes = {static_cast<const uint8_t*>(info.ptr),
                 static_cast<size_t>(info.size * info.itemsize)};
      items.push_back(std::move(t));
    }
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
    return out;
  }

  void Close() { store_.reset(); }

 private:
  static bool IsCContiguous(const py::buffer_info& info) {
    py::ssize_t expected = info.itemsize;
    for (py::ssize_t i = info.ndim - 1; i >= 0; --i) {
      if (info.shape[i] != 1 && info.strides[i] != expected) return false;
      expected *= info.shape[i];
    }
    return true;
  }

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
      .def("changed", &PySubscriber::Changed, py::arg("since"), py::arg("to"))
      .def("close", &PySubscriber::Close);

  py::class_<PyLocalPublisher>(m, "_LocalPublisher")
      .def(py::init<const std::filesystem::path&, const std::string&, uint64_t, uint32_t>(),
           py::arg("store"), py::arg("channel"), py::arg("chunk_size"),
           py::arg("keep_versions") = 2)
      .def("publish", &PyLocalPublisher::Publish, py::arg("tensors"), py::arg("metadata"))
      .def("close", &PyLocalPublisher::Close);

  m.def(
      "_dtype_bits",
      [](const std::string& name) {
        return weightcast::DTypeBits(ValueOrThrow(DTypeFromName(name)));
      },
      py::arg("dtype"));
}
