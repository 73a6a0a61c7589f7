// Helpers every binding file of the `_weightcast` extension shares: C++ Status -> Python
// exception, tensors handed over from Python, loggers for the in-process daemons.
// Every function here needs the GIL unless it says otherwise.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <weightcast/status.h>

#include "metrics/log.h"
#include "tensor_writer.h"

namespace weightcast::python {

namespace py = pybind11;

// Creates weightcast.Error and one subclass per Code in `m`. Once, at import.
void RegisterErrors(py::module_& m);

// Raises the Python exception for `status` (not OK): its code's class, the C++ message.
[[noreturn]] void Throw(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) Throw(status);
}

template <typename T>
T ValueOrThrow(Result<T> result) {
  if (!result.ok()) Throw(result.status());
  return std::move(result).value();
}

// Seconds from Python (None: no limit) as a duration; InvalidArgumentError when negative or NaN.
std::optional<std::chrono::nanoseconds> ToDuration(std::optional<double> seconds);

// Tensors from Python: a list of (name, safetensors dtype name, shape, buffer) whose buffers are
// C-contiguous (python/weightcast/_tensors.py prepares them). The buffer_infos pin the memory:
// keep `pinned` alive while the returned spans are used (with the GIL released).
std::vector<TensorBytes> TensorsFromPython(const py::list& tensors,
                                           std::vector<py::buffer_info>& pinned);

// A logger for an in-process daemon: events at `level` ("debug", "info", "warn", "error") and
// above, appended to `file` (stderr when empty). Thread-safe; needs no GIL once made.
metrics::Logger MakeLogger(const std::string& component, const std::string& level,
                           const std::string& file);

// The cluster secret from `secret_file`, or $WEIGHTCAST_SECRET when None (never from an argument
// value: argv and Python reprs leak).
std::string LoadSecret(const std::optional<std::string>& secret_file);

// Registers the coordinated Publisher (remote.cc).
void RegisterRemote(py::module_& m);
// Registers the live tensors (live_module.cc).
void RegisterLive(py::module_& m);

}  // namespace weightcast::python
