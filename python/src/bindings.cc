#include "bindings.h"

#include <pybind11/stl.h>

#include <cmath>
#include <map>
#include <string>

namespace weightcast::python {

namespace {

// Exception classes, one per Code, created at import and held for the life of the interpreter.
std::map<Code, PyObject*>& ErrorClasses() {
  static auto* classes = new std::map<Code, PyObject*>();
  return *classes;
}
PyObject* g_error_base = nullptr;

bool IsCContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t i = info.ndim - 1; i >= 0; --i) {
    if (info.shape[i] != 1 && info.strides[i] != expected) return false;
    expected *= info.shape[i];
  }
  return true;
}

}  // namespace

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

void Throw(const Status& status) {
  auto it = ErrorClasses().find(status.code());
  PyObject* cls = it != ErrorClasses().end() ? it->second : g_error_base;
  PyErr_SetString(cls, status.message().c_str());
  throw py::error_already_set();
}

std::optional<std::chrono::nanoseconds> ToDuration(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  if (!std::isfinite(*seconds) || *seconds < 0) {
    Throw(InvalidArgument("timeout must be a finite number of seconds >= 0, not " +
                          std::to_string(*seconds)));
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(*seconds * 1e9));
}

std::vector<TensorView> TensorsFromPython(const py::list& tensors,
                                          std::vector<py::buffer_info>& pinned) {
  std::vector<TensorView> items;
  pinned.clear();
  pinned.reserve(tensors.size());  // no reallocation: the spans point into these
  items.reserve(tensors.size());
  for (const py::handle item : tensors) {
    auto tuple = item.cast<py::tuple>();
    if (tuple.size() != 4 && tuple.size() != 5)
      Throw(InvalidArgument("a tensor entry is not (name, dtype, shape, buffer[, slice])"));
    TensorView t;
    t.name = tuple[0].cast<std::string>();
    t.dtype = tuple[1].cast<std::string>();
    t.shape = tuple[2].cast<std::vector<uint64_t>>();
    pinned.push_back(tuple[3].cast<py::buffer>().request());
    const py::buffer_info& info = pinned.back();
    if (!IsCContiguous(info)) Throw(InvalidArgument("tensor " + t.name + " is not C-contiguous"));
    t.bytes = {static_cast<const uint8_t*>(info.ptr),
               static_cast<size_t>(info.size * info.itemsize)};
    if (tuple.size() == 5 && !tuple[4].is_none()) {
      // (dim, start, extent): a sharded rank's slice of a larger tensor (TensorSliceOf).
      auto slice = tuple[4].cast<std::tuple<uint32_t, uint64_t, uint64_t>>();
      t.slice = {std::get<0>(slice), std::get<1>(slice), std::get<2>(slice)};
      if (t.slice.extent == 0) Throw(InvalidArgument("tensor " + t.name + ": slice extent 0"));
    }
    items.push_back(std::move(t));
  }
  return items;
}

}  // namespace weightcast::python
