#include "swarm/tuning.h"

#include <algorithm>

namespace weightcast::swarm {

void ApplyTuning(const Tuning& tuning, bool source, SchedulerOptions& options) {
  options.window_per_peer = tuning.window_per_peer;
  options.max_window_per_peer = std::max(tuning.max_window_per_peer, tuning.window_per_peer);
  options.adaptive_window = tuning.adaptive_window;
  options.max_outstanding = tuning.max_outstanding;
  options.upload_slots =
      source && tuning.source_upload_slots > 0 ? tuning.source_upload_slots : tuning.upload_slots;
  options.serve_queue_limit = tuning.serve_queue_limit;
  options.slot_per_peer = tuning.slot_per_peer;
  options.endgame_max_requests = tuning.endgame_max_requests;
  options.request_timeout = tuning.request_timeout;
}

}  // namespace weightcast::swarm
