#include "rollout/types.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace weightcast::rollout {

std::string_view PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kIdle:
      return "IDLE";
    case Phase::kFetching:
      return "FETCHING";
    case Phase::kPrepared:
      return "PREPARED";
    case Phase::kCommitted:
      return "COMMITTED";
    case Phase::kFailed:
      return "FAILED";
  }
  return "?";
}

std::string_view DecisionName(Decision decision) {
  switch (decision) {
    case Decision::kNone:
      return "NONE";
    case Decision::kCommit:
      return "COMMIT";
    case Decision::kAbort:
      return "ABORT";
  }
  return "?";
}

Result<CommitPolicy> ParseCommitPolicy(std::string_view text) {
  if (text == "all") return CommitPolicy{PolicyKind::kAll, 1.0};
  if (text == "each") return CommitPolicy{PolicyKind::kEach, 1.0};
  constexpr std::string_view kQuorum = "quorum:";
  auto bad = [&](std::string_view why) {
    return InvalidArgument("commit policy \"" + std::string(text) + "\": " + std::string(why) +
                           " (expected all, each or quorum:FRACTION such as quorum:0.8)");
  };
  if (!text.starts_with(kQuorum)) return bad("unknown policy");
  std::string number(text.substr(kQuorum.size()));
  bool percent = !number.empty() && number.back() == '%';
  if (percent) number.pop_back();
  if (number.empty()) return bad("missing fraction");
  // strtod accepts leading blanks, hex and inf; insist on plain digits and one dot.
  for (char c : number) {
    if ((c < '0' || c > '9') && c != '.') return bad("fraction is not a number");
  }
  char* end = nullptr;
  double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size()) return bad("fraction is not a number");
  if (percent) value /= 100.0;
  if (!(value > 0.0 && value <= 1.0)) return bad("fraction must be in (0, 1]");
  return CommitPolicy{PolicyKind::kQuorum, value};
}

std::string FormatCommitPolicy(const CommitPolicy& policy) {
  switch (policy.kind) {
    case PolicyKind::kAll:
      return "all";
    case PolicyKind::kEach:
      return "each";
    case PolicyKind::kQuorum: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), "quorum:%g", policy.fraction);
      return buf;
    }
  }
  return "?";
}

}  // namespace weightcast::rollout
