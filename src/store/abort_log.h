// Why staging versions were dropped: ROOT/<channel>/aborted, the latest kAbortLogLines aborts, one
// a line ("VERSION REASON"), rewritten atomically by each Store::Abort. A reader streaming a
// version that is still arriving (client/version_stream.h) finds there why its staging went
// away, so that its stream ends with the abort's reason rather than a bare "gone". Advisory: a
// missing or damaged file only loses reasons.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "store/layout.h"

namespace weightcast::store {

inline constexpr size_t kAbortLogLines = 16;

// Appends "VERSION REASON" (control bytes and newlines in the reason made spaces), keeping the
// latest kAbortLogLines lines.
Status RecordAbort(const ChannelLayout& layout, Version version, std::string_view reason);

// The reason recorded for `version`'s latest abort; nullopt when none is recorded.
std::optional<std::string> FindAbortReason(const ChannelLayout& layout, Version version);

// The same over the file's bytes. Pure.
std::optional<std::string> FindAbortReasonIn(std::string_view log, Version version);

}  // namespace weightcast::store
