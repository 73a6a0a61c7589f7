#include "rollout/participant.h"

#include <algorithm>
#include <string>

namespace weightcast::rollout {
namespace {

std::string V(Version v) { return "version " + std::to_string(v.value()); }

}  // namespace

Result<HookFailure> ParseHookFailure(std::string_view text) {
  if (text == "report") return HookFailure::kReport;
  if (text == "rollback") return HookFailure::kRollback;
  return InvalidArgument("hook failure policy \"" + std::string(text) +
                         "\": expected report or rollback");
}

std::string_view ParticipantActionKindName(ParticipantActionKind kind) {
  switch (kind) {
    case ParticipantActionKind::kFetch:
      return "Fetch";
    case ParticipantActionKind::kAbortStaging:
      return "AbortStaging";
    case ParticipantActionKind::kCommit:
      return "Commit";
    case ParticipantActionKind::kSwitch:
      return "Switch";
    case ParticipantActionKind::kRunHook:
      return "RunHook";
    case ParticipantActionKind::kRequestRollback:
      return "RequestRollback";
    case ParticipantActionKind::kReport:
      return "Report";
  }
  return "?";
}

Result<Participant> Participant::Create(ParticipantOptions options, LocalState state) {
  Participant p(options);
  for (Version v : state.kept) {
    if (v.value() == 0) return InvalidArgument("local state keeps version 0");
    p.kept_.insert(v);
  }
  if (state.current.value() != 0 && !p.kept_.contains(state.current)) {
    return InvalidArgument("local current " + V(state.current) + " is not a kept version");
  }
  p.current_ = state.current;
  for (const LocalState::Staging& s : state.staging) {
    if (s.version.value() == 0) return InvalidArgument("local state stages version 0");
    if (p.kept_.contains(s.version)) {
      return InvalidArgument(V(s.version) + " is both committed and staging");
    }
    if (p.Find(s.version) != nullptr) {
      return InvalidArgument(V(s.version) + " is staging twice");
    }
    p.staging_.push_back(
        Staging{s.version, s.complete ? StageState::kVerified : StageState::kPartial, {}, {}});
  }
  return p;
}

Participant::Staging* Participant::Find(Version v) {
  for (Staging& s : staging_) {
    if (s.version == v) return &s;
  }
  return nullptr;
}

const Participant::Staging* Participant::Find(Version v) const {
  for (const Staging& s : staging_) {
    if (s.version == v) return &s;
  }
  return nullptr;
}

Version Participant::PrepareVersion() const {
  if (!target_) return Version();
  const Target& t = *target_;
  if (t.version.value() == 0 || t.decision != Decision::kNone) return Version();
  if (t.version == current_ || kept_.contains(t.version)) return Version();
  return t.version;
}

Version Participant::Wanted() const {
  if (!target_) return Version();
  const Target& t = *target_;
  if (t.current.value() != 0 && t.current != current_) {
    // Catching up (or rolling back) comes first: the fleet's current version is what this
    // node must serve before it prepares anything newer. Unless it could not be fetched
    // (nobody serves it any more): then a newer version is prepared meanwhile, since its commit
    // is what moves the fleet past the unreachable one (waiting for it would wedge the channel).
    if (kept_.contains(t.current)) return Version();
    const Staging* s = Find(t.current);
    if (s != nullptr && s->state == StageState::kFailed) {
      if (Version newer = PrepareVersion(); newer > t.current) return newer;
    }
    return t.current;
  }
  return PrepareVersion();
}

bool Participant::IsWanted(Version v) const {
  if (!target_) return true;  // before the first target nothing is dropped
  const Target& t = *target_;
  if (t.current.value() != 0 && t.current != current_ && v == t.current) return true;
  return v == PrepareVersion();
}

void Participant::Step(Time now) {
  if (!target_ || op_ != StoreOp::kNone) return;
  const Target& t = *target_;

  // Staging nobody wants any more (aborted, superseded, rolled back past) goes first, one at a
  // time: the store does one change at a time and the disk space is better freed early.
  for (Staging& s : staging_) {
    bool aborting = s.state == StageState::kAborting;
    if (!aborting && IsWanted(s.version)) continue;
    if (aborting && now < s.retry_at) continue;
    if (fetching_ == s.version) fetching_ = Version();
    s.state = StageState::kAborting;
    op_ = StoreOp::kAbort;
    op_version_ = s.version;
    Emit(ParticipantActionKind::kAbortStaging, s.version);
    return;
  }

  if (t.current.value() != 0 && t.current != current_) {
    Version c = t.current;
    if (kept_.contains(c)) {
      if (switch_failed_ == c && now < switch_retry_at_) return;
      op_ = StoreOp::kSwitch;
      op_version_ = c;
      Emit(ParticipantActionKind::kSwitch, c);
      return;
    }
    if (const Staging* s = Find(c); s != nullptr && s->state == StageState::kVerified) {
      // Invariant: only a version the owner reported staged and verified is committed.
      op_ = StoreOp::kCommit;
      op_version_ = c;
      Emit(ParticipantActionKind::kCommit, c);
      return;
    }
  }

  Version want = Wanted();
  if (want.value() == 0 || fetching_ == want) return;
  if (fetching_.value() != 0) return;  // one fetch at a time; the other one is still wanted
  Staging* s = Find(want);
  if (s != nullptr && s->state == StageState::kVerified) return;  // prepared, waiting
  if (s != nullptr && s->state == StageState::kFailed && now < s->retry_at) return;
  if (s == nullptr) {
    staging_.push_back(Staging{want, StageState::kFetching, {}, {}});
  } else {
    s->state = StageState::kFetching;
  }
  fetching_ = want;
  Emit(ParticipantActionKind::kFetch, want);
}

void Participant::StartHook(HookRun run) {
  if (!options_.hook) return;
  if (hook_running_) {
    hook_next_ = run;  // replaces an older queued run: only the newest current matters
    return;
  }
  hook_ = run;
  hook_next_.reset();
  hook_running_ = true;
  hook_attempt_ = 1;
  hook_retry_at_ = Time::max();
  hook_error_.clear();
  Emit(ParticipantActionKind::kRunHook, run.version, Version(), 1);
}

void Participant::NoteReport(const Report& before) {
  if (report() != before) Emit(ParticipantActionKind::kReport, report().version);
}

std::span<const ParticipantAction> Participant::OnTarget(Time now, const Target& target) {
  actions_.clear();
  Report before = report();
  target_ = target;
  Step(now);
  NoteReport(before);
  return Flush();
}

std::span<const ParticipantAction> Participant::OnStaged(Time now, Version version,
                                                         const Status& status) {
  actions_.clear();
  Report before = report();
  if (fetching_ == version) fetching_ = Version();
  Staging* s = Find(version);
  if (s != nullptr && s->state != StageState::kAborting) {
    if (status.ok()) {
      s->state = StageState::kVerified;
      s->error.clear();
    } else {
      s->state = StageState::kFailed;
      s->error = status.ToString();
      s->retry_at = now + options_.retry_backoff;
    }
  }
  Step(now);
  NoteReport(before);
  return Flush();
}

std::span<const ParticipantAction> Participant::OnCommitted(Time now, Version version,
                                                            const Status& status) {
  actions_.clear();
  Report before = report();
  if (op_ == StoreOp::kCommit && op_version_ == version) op_ = StoreOp::kNone;
  if (status.ok()) {
    Version before_current = current_;
    current_ = version;
    kept_.insert(version);
    std::erase_if(staging_, [&](const Staging& s) { return s.version == version; });
    StartHook(HookRun{version, before_current, false});
  } else if (Staging* s = Find(version); s != nullptr) {
    // Fetching again resumes the staging and verifies what is missing before a new commit.
    s->state = StageState::kFailed;
    s->error = "commit: " + status.ToString();
    s->retry_at = now + options_.retry_backoff;
  }
  Step(now);
  NoteReport(before);
  return Flush();
}

std::span<const ParticipantAction> Participant::OnSwitched(Time now, Version version,
                                                           const Status& status) {
  actions_.clear();
  Report before = report();
  if (op_ == StoreOp::kSwitch && op_version_ == version) op_ = StoreOp::kNone;
  if (status.ok()) {
    Version before_current = current_;
    current_ = version;
    switch_failed_ = Version();
    switch_error_.clear();
    StartHook(HookRun{version, before_current, true});
  } else if (status.code() == Code::kNotFound) {
    // The store no longer keeps it (collected): fetch it like a missed commit.
    kept_.erase(version);
  } else {
    switch_failed_ = version;
    switch_error_ = "switch: " + status.ToString();
    switch_retry_at_ = now + options_.retry_backoff;
  }
  Step(now);
  NoteReport(before);
  return Flush();
}

std::span<const ParticipantAction> Participant::OnAborted(Time now, Version version,
                                                          const Status& status) {
  actions_.clear();
  Report before = report();
  if (op_ == StoreOp::kAbort && op_version_ == version) op_ = StoreOp::kNone;
  if (status.ok() || status.code() == Code::kNotFound) {
    std::erase_if(staging_, [&](const Staging& s) { return s.version == version; });
  } else if (Staging* s = Find(version); s != nullptr) {
    s->error = "abort: " + status.ToString();
    s->retry_at = now + options_.retry_backoff;
  }
  Step(now);
  NoteReport(before);
  return Flush();
}

std::span<const ParticipantAction> Participant::OnHookDone(Time now, Version version,
                                                           const Status& status) {
  actions_.clear();
  Report before = report();
  if (hook_running_ && hook_ && hook_->version == version) {
    hook_running_ = false;
    if (status.ok()) {
      hook_error_.clear();
      hook_.reset();
    } else if (hook_attempt_ <= options_.hook_retries) {
      hook_error_ =
          "hook attempt " + std::to_string(hook_attempt_) + " failed: " + status.ToString();
      hook_error_version_ = version;
      hook_retry_at_ = now + options_.hook_retry_backoff;
    } else {
      hook_error_ =
          "hook failed after " + std::to_string(hook_attempt_) + " attempts: " + status.ToString();
      hook_error_version_ = version;
      HookRun run = *hook_;
      hook_.reset();
      // Rolling back is a fleet decision: ask the coordinator, and only while the fleet is
      // still on the version the engine refused (not for a hook after a rollback).
      if (options_.hook_failure == HookFailure::kRollback && !run.after_switch &&
          run.before.value() != 0 && current_ == version && target_ &&
          target_->current == version) {
        Emit(ParticipantActionKind::kRequestRollback, version, run.before);
      }
    }
    if (hook_next_) {
      HookRun next = *hook_next_;
      hook_.reset();
      hook_retry_at_ = Time::max();
      StartHook(next);
    }
  }
  Step(now);
  NoteReport(before);
  return Flush();
}

std::span<const ParticipantAction> Participant::OnTimer(Time now) {
  actions_.clear();
  Report before = report();
  if (!hook_running_ && hook_ && hook_retry_at_ <= now) {
    hook_retry_at_ = Time::max();
    hook_running_ = true;
    ++hook_attempt_;
    Emit(ParticipantActionKind::kRunHook, hook_->version, Version(), hook_attempt_);
  }
  Step(now);
  NoteReport(before);
  return Flush();
}

Report Participant::report() const {
  Report r;
  r.current = current_;
  if (!target_) {
    // Restarted before any decision arrived: say what the disk holds, so the coordinator can
    // count a prepared staging without waiting for a new fetch.
    for (const Staging& s : staging_) {
      if (s.state == StageState::kVerified && s.version > r.version) r.version = s.version;
    }
    if (r.version.value() != 0) {
      r.phase = Phase::kPrepared;
      return r;
    }
  } else if (Version w = Wanted(); w.value() != 0) {
    r.version = w;
    const Staging* s = Find(w);
    if (s != nullptr && s->state == StageState::kFailed) {
      r.phase = Phase::kFailed;
      r.error = s->error;
    } else if (s != nullptr && s->state == StageState::kVerified) {
      r.phase = Phase::kPrepared;
    } else {
      r.phase = Phase::kFetching;
    }
    return r;
  } else if (target_->current.value() != 0 && target_->current != current_ &&
             switch_failed_ == target_->current) {
    r.version = switch_failed_;
    r.phase = Phase::kFailed;
    r.error = switch_error_;
    return r;
  }
  r.version = current_;
  r.phase = current_.value() != 0 ? Phase::kCommitted : Phase::kIdle;
  if (current_.value() != 0 && hook_error_version_ == current_) r.error = hook_error_;
  return r;
}

bool Participant::settled() const {
  if (!target_ || op_ != StoreOp::kNone || fetching_.value() != 0) return false;
  if (hook_running_ || hook_retry_at_ != Time::max()) return false;
  if (target_->current.value() != 0 && target_->current != current_) return false;
  for (const Staging& s : staging_) {
    if (s.state != StageState::kVerified || !IsWanted(s.version)) return false;
  }
  return true;
}

Time Participant::next_deadline() const {
  Time t = hook_running_ ? Time::max() : hook_retry_at_;
  if (switch_failed_.value() != 0) t = std::min(t, switch_retry_at_);
  for (const Staging& s : staging_) {
    if (s.state == StageState::kFailed || s.state == StageState::kAborting) {
      t = std::min(t, s.retry_at);
    }
  }
  return t;
}

}  // namespace weightcast::rollout
