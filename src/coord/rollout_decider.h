// The two-phase rollout plugged into the coordinator's Decider seam (coord/decide.h,
// docs/rollout.md): one rollout::RolloutTracker per channel decides, per the commit policy
// (`all`, `quorum:F`, `each`) and the prepare deadline, whether the pending version is
// committed or aborted.
//
// The Decider seam polls: every call hands in the channel's durable state (the version log) and
// the live followers' last progress. This adapter turns that into the tracker's events:
// - decisions the tracker emitted are acknowledged (OnPersisted) once the log shows them; one
//   the log does not show yet (its write failed) is handed out again;
// - a durable state the tracker did not produce (the log's own rollback, a coordinator that
//   restarted with this adapter fresh) is adopted (RolloutTracker::OnExternalChange);
// - membership changes become OnMemberJoined / OnMemberDead, progress becomes OnProgress.
// A tracker is created the first time a channel is seen; for `recovery_grace` after the
// adapter was created no decision is taken, so that the agents of a restarted coordinator can
// register and report before `all` counts them.
//
// Thread-safety: like every Decider, called under the coordinator's lock, one call at a time.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <weightcast/status.h>
#include <weightcast/types.h>

#include "coord/decide.h"
#include "net/clock.h"
#include "rollout/tracker.h"

namespace weightcast::coord {

struct RolloutDeciderOptions {
  rollout::CommitPolicy policy{};
  net::Duration prepare_deadline = std::chrono::minutes(10);
  // Use the heartbeat timeout: how long a restarted coordinator waits for its agents.
  net::Duration recovery_grace = std::chrono::seconds(3);
  // For OnPublish, which gets no time, and for the start of the recovery grace. Pass the
  // coordinator's clock. Null (tests with a fake clock the caller cannot reach): the time of
  // the last Decide call, and the grace starts when the first channel is seen.
  const net::Clock* clock = nullptr;
};

class RolloutDecider final : public Decider {
 public:
  // kInvalidArgument for a bad policy fraction or a non-positive deadline.
  static Result<std::shared_ptr<RolloutDecider>> Create(RolloutDeciderOptions options);

  DecisionChange OnPublish(const ChannelState& channel, const wire::VersionEntry& entry) override;
  std::vector<DecisionChange> Decide(const ChannelState& channel,
                                     std::span<const NodeProgress> nodes,
                                     net::TimePoint now) override;

  // The pending version of `channel` and its counts (status, metrics); nullopt when none.
  std::optional<rollout::PendingStatus> pending(const std::string& channel) const;

 private:
  struct Channel {
    rollout::RolloutTracker tracker;
    std::set<PeerId> members;
  };
  explicit RolloutDecider(RolloutDeciderOptions options) : options_(options) {}
  net::TimePoint Now();
  Channel& Get(const ChannelState& channel, net::TimePoint now);
  // Acknowledges what the log shows; adopts a log the tracker did not write. Appends any
  // decisions that follows to `out`.
  void Reconcile(Channel& ch, const ChannelState& channel, net::TimePoint now,
                 std::vector<rollout::TrackerAction>& out);

  RolloutDeciderOptions options_;
  std::optional<net::TimePoint> start_;
  std::optional<net::TimePoint> last_now_;
  std::map<std::string, Channel, std::less<>> channels_;
};

}  // namespace weightcast::coord
