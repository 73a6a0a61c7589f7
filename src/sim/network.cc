#include "sim/network.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace weightcast::sim {

Network::Network(std::vector<NodeLink> nodes, std::vector<RackLink> racks,
                 double rebalance_interval)
    : interval_(rebalance_interval) {
  const uint32_t n = static_cast<uint32_t>(nodes.size());
  rack_base_ = 2 * n;
  res_.resize(2 * n + 2 * racks.size());
  shared_.resize(n);
  rack_of_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    res_[2 * i].capacity = nodes[i].up;
    res_[2 * i + 1].capacity = nodes[i].shared ? 0 : nodes[i].down;
    shared_[i] = nodes[i].shared ? 1 : 0;
    rack_of_[i] = nodes[i].rack;
  }
  for (size_t r = 0; r < racks.size(); ++r) {
    res_[rack_base_ + 2 * r].capacity = racks[r].egress;
    res_[rack_base_ + 2 * r + 1].capacity = racks[r].ingress;
  }
}

void Network::Detach(FlowId f, uint32_t r) {
  std::vector<FlowId>& v = res_[r].flows;
  auto it = std::find(v.begin(), v.end(), f);
  if (it != v.end()) {
    *it = v.back();
    v.pop_back();
  }
}

void Network::SetRate(double now, FlowId id, double rate) {
  Flow& f = flows_[id];
  f.left -= f.rate * (now - f.last);
  if (f.left < 0) f.left = 0;
  f.last = now;
  for (uint8_t k = 0; k < f.nres; ++k) res_[f.res[k]].used += rate - f.rate;
  f.rate = rate;
  ++f.gen;
  f.finish = rate > 0 ? now + f.left / rate : kNever;
  HeapUpdate(id);
}

void Network::HeapUp(uint32_t pos) {
  const FlowId f = heap_[pos];
  while (pos > 0) {
    const uint32_t parent = (pos - 1) / 2;
    if (!Before(f, heap_[parent])) break;
    HeapPlace(pos, heap_[parent]);
    pos = parent;
  }
  HeapPlace(pos, f);
}

void Network::HeapDown(uint32_t pos) {
  const FlowId f = heap_[pos];
  const uint32_t n = static_cast<uint32_t>(heap_.size());
  while (true) {
    uint32_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n && Before(heap_[child + 1], heap_[child])) ++child;
    if (!Before(heap_[child], f)) break;
    HeapPlace(pos, heap_[child]);
    pos = child;
  }
  HeapPlace(pos, f);
}

void Network::HeapUpdate(FlowId f) {
  uint32_t pos = flows_[f].heap_pos;
  if (pos == kNotQueued) {
    pos = static_cast<uint32_t>(heap_.size());
    heap_.push_back(f);
    flows_[f].heap_pos = pos;
  }
  HeapUp(pos);
  HeapDown(flows_[f].heap_pos);
}

void Network::HeapErase(FlowId f) {
  const uint32_t pos = flows_[f].heap_pos;
  if (pos == kNotQueued) return;
  flows_[f].heap_pos = kNotQueued;
  const FlowId last = heap_.back();
  heap_.pop_back();
  if (last == f) return;
  HeapPlace(pos, last);
  HeapUp(pos);
  HeapDown(flows_[last].heap_pos);
}

void Network::MarkDirty(double now) {
  if (!dirty_) {
    dirty_ = true;
    // A change after a quiet spell is rebalanced at once; bursts are coalesced per interval.
    if (now - last_rebalance_ > interval_) last_rebalance_ = now - interval_;
  }
}

FlowId Network::Start(double now, uint32_t src, uint32_t dst, double bytes, uint64_t tag) {
  FlowId id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<FlowId>(flows_.size());
    flows_.emplace_back();
    active_pos_.push_back(0);
    frozen_.push_back(0);
  }
  Flow& f = flows_[id];
  const uint32_t gen = f.gen + 1;
  f = Flow{};
  f.gen = gen;
  f.src = src;
  f.dst = dst;
  f.tag = tag;
  f.total = f.left = bytes;
  f.last = now;
  f.active = true;
  f.res[f.nres++] = UpRes(src);
  f.res[f.nres++] = DownRes(dst);
  const int32_t rs = rack_of_[src], rd = rack_of_[dst];
  if (rs != rd) {
    if (rs >= 0) f.res[f.nres++] = rack_base_ + 2 * static_cast<uint32_t>(rs);
    if (rd >= 0) f.res[f.nres++] = rack_base_ + 2 * static_cast<uint32_t>(rd) + 1;
  }
  // Until the next rebalance the flow takes what is spare on its path; nothing is overcommitted.
  double spare = kNever;
  for (uint8_t k = 0; k < f.nres; ++k) {
    Resource& r = res_[f.res[k]];
    r.flows.push_back(id);
    spare = std::min(spare, std::max(0.0, r.capacity - r.used));
  }
  active_pos_[id] = static_cast<uint32_t>(active_list_.size());
  active_list_.push_back(id);
  ++active_;
  SetRate(now, id, spare);
  MarkDirty(now);
  return id;
}

void Network::Remove(FlowId id) {
  Flow& f = flows_[id];
  for (uint8_t k = 0; k < f.nres; ++k) {
    res_[f.res[k]].used -= f.rate;
    Detach(id, f.res[k]);
  }
  f.rate = 0;
  f.active = false;
  ++f.gen;
  HeapErase(id);
  const uint32_t pos = active_pos_[id];
  active_list_[pos] = active_list_.back();
  active_pos_[active_list_[pos]] = pos;
  active_list_.pop_back();
  --active_;
  free_.push_back(id);
}

double Network::Stop(double now, FlowId id) {
  Flow& f = flows_[id];
  if (!f.active) return 0;
  f.left -= f.rate * (now - f.last);
  if (f.left < 0) f.left = 0;
  const double moved = f.total - f.left;
  aborted_ += moved;
  Remove(id);
  MarkDirty(now);
  return moved;
}

void Network::SetNodeLink(double now, uint32_t node, double up, double down) {
  res_[2 * node].capacity = up;
  if (!shared_[node]) res_[2 * node + 1].capacity = down;
  MarkDirty(now);
  Rebalance(now);
}

void Network::Rebalance(double now) {
  dirty_ = false;
  last_rebalance_ = now;
  // Progressive filling: raise every unfrozen flow's rate together; the resource that fills
  // first fixes (freezes) its flows at its fair level; repeat with what is left.
  struct Level {
    double level;
    uint32_t res;
    uint32_t version;
    bool operator>(const Level& o) const { return level > o.level; }
  };
  std::priority_queue<Level, std::vector<Level>, std::greater<Level>> levels;
  for (uint32_t r = 0; r < res_.size(); ++r) {
    Resource& x = res_[r];
    x.rem = x.capacity;
    x.unfrozen = static_cast<uint32_t>(x.flows.size());
    ++x.version;
    if (x.unfrozen > 0) levels.push(Level{x.rem / x.unfrozen, r, x.version});
  }
  for (FlowId f : active_list_) frozen_[f] = 0;
  while (!levels.empty()) {
    const Level top = levels.top();
    levels.pop();
    Resource& x = res_[top.res];
    if (x.unfrozen == 0) continue;
    if (top.version != x.version) {
      // Lazy update: freezing a flow at the current (lowest) level can only raise the level of
      // its other resources, so a stale entry is a lower bound; re-queue the resource at its
      // current level when the stale entry surfaces, instead of once per frozen flow.
      ++x.version;
      levels.push(Level{std::max(0.0, x.rem) / x.unfrozen, top.res, x.version});
      continue;
    }
    const double level = std::max(0.0, x.rem / x.unfrozen);
    for (FlowId id : x.flows) {
      if (frozen_[id]) continue;
      frozen_[id] = 1;
      Flow& f = flows_[id];
      for (uint8_t k = 0; k < f.nres; ++k) {
        Resource& y = res_[f.res[k]];
        y.rem -= level;
        --y.unfrozen;
        if (f.res[k] != top.res) ++y.version;
      }
      // Only flows whose rate moved get a new finish event; the rest keep theirs (a change
      // under one part in a million is left alone: it moves a finish by microseconds).
      const double old = f.rate;
      if (std::abs(level - old) > 1e-6 * std::max(level, old)) {
        SetRate(now, id, level);
      }
    }
    x.unfrozen = 0;
  }
}

double Network::NextFinish() { return heap_.empty() ? kNever : flows_[heap_[0]].finish; }

FlowId Network::FinishNext() {
  const FlowId id = heap_[0];
  Flow& f = flows_[id];
  const double t = f.finish;
  delivered_ += f.total;
  f.left = 0;
  f.last = t;
  Remove(id);  // takes it off the heap
  MarkDirty(t);
  return id;
}

}  // namespace weightcast::sim

namespace weightcast::sim {

std::optional<FlowId> Network::Step() {
  const double finish = NextFinish();
  const double rebalance = NextRebalance();
  if (rebalance <= finish) {
    Rebalance(rebalance);
    return std::nullopt;
  }
  return FinishNext();
}

}  // namespace weightcast::sim
