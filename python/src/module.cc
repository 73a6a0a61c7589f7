// The `_weightcast` extension: bindings of the public C++ API (<weightcast/...>). The Python
// package (python/weightcast/) builds the user-facing classes on top of these.
//
// Conventions: every C++ Status that is not OK becomes a Python exception of the class for its
// code (weightcast.Error and subclasses), carrying the C++ message. The GIL is released around
// anything that waits or does I/O; waits are sliced so Ctrl-C still interrupts them. Each
// binding file has one Register* function (bindings.h), called below.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>

#include <weightcast/options.h>
#include <weightcast/tensor.h>

#include "bindings.h"

PYBIND11_MODULE(_weightcast, m) {
  using namespace weightcast::python;
  m.doc() = "weightcast C++ core (use the `weightcast` package, not this module directly)";
  RegisterErrors(m);
  m.attr("AUTO_CHUNK_SIZE") = weightcast::ChunkSizeLimits::kAuto;
  m.def("auto_chunk_size", &weightcast::AutoChunkSize, py::arg("total_bytes"),
        "The chunk size chunk_size='auto' gives a channel's first version of total_bytes");
  m.attr("MIN_CHUNK_SIZE") = weightcast::ChunkSizeLimits::kMin;
  m.attr("MAX_CHUNK_SIZE") = weightcast::ChunkSizeLimits::kMax;
  // The CLI's size rules ("1MiB", "64KiB", "4096"), so chunk_size= and the rate limits read
  // sizes exactly as --chunk-size and --upload-limit do.
  m.def(
      "_parse_size",
      [](const std::string& text) { return ValueOrThrow(weightcast::ParseByteSize(text)); },
      py::arg("text"));
  m.def(
      "_dtype_bits",
      [](const std::string& name) { return ValueOrThrow(weightcast::DTypeBitWidth(name)); },
      py::arg("dtype"));
  RegisterPublisher(m);
  RegisterSubscriber(m);
  RegisterLive(m);
}
