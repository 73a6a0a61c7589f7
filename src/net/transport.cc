#include "net/transport.h"

#include <cstdio>
#include <mutex>

namespace weightcast::net {

void LogToStderr(std::string_view line) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  std::fprintf(stderr, "weightcast net: %.*s\n", static_cast<int>(line.size()), line.data());
}

}  // namespace weightcast::net
