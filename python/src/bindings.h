// Helpers every binding file of the `_weightcast` extension shares: Status -> Python exception,
// timeouts and tensors handed over from Python. The extension binds the public C++ API only
// (<weightcast/...>, docs/cpp_api.md); each binding file registers its classes with one
// Register* function that module.cc calls at import.
// Every function here needs the GIL unless it says otherwise.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <optional>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/tensor.h>

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
// keep `pinned` alive while the returned views are used (with the GIL released).
std::vector<TensorView> TensorsFromPython(const py::list& tensors,
                                          std::vector<py::buffer_info>& pinned);

// Calls `wait(slice)` (with the GIL released) in slices of at most 200 ms until it returns
// anything but kDeadlineExceeded or `timeout` passes, checking for Ctrl-C between slices (a
// KeyboardInterrupt then propagates). Returns the last result.
template <typename T, typename Fn>
Result<T> WaitInSlices(std::optional<std::chrono::nanoseconds> timeout, Fn&& wait) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = timeout ? Clock::now() + *timeout : Clock::time_point::max();
  constexpr auto kSlice = std::chrono::milliseconds(200);
  while (true) {
    const auto now = Clock::now();
    const std::chrono::nanoseconds slice =
        deadline == Clock::time_point::max()
            ? std::chrono::nanoseconds(kSlice)
            : std::min<std::chrono::nanoseconds>(
                  kSlice, std::max<Clock::duration>(deadline - now, Clock::duration::zero()));
    Result<T> result = [&] {
      py::gil_scoped_release release;
      return wait(slice);
    }();
    if (result.ok() || result.status().code() != Code::kDeadlineExceeded ||
        Clock::now() >= deadline) {
      return result;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

// Registers the classes of each binding file (publisher_module.cc, subscriber_module.cc).
void RegisterPublisher(py::module_& m);
void RegisterSubscriber(py::module_& m);
void RegisterLive(py::module_& m);  // live_module.cc

}  // namespace weightcast::python
