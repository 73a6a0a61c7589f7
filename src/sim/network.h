// The simulator's network model: flows between nodes that share capacities (sender's upload,
// receiver's download, and both racks' uplinks when a flow leaves a rack). Rates are max-min
// fair (what competing TCP flows approach): recomputed for the whole network by progressive
// filling at most once per `rebalance_interval` after any change, and in between a new flow
// takes whatever capacity is spare on its path, so no resource is ever over-committed.
// docs/simulator.md justifies the model.
//
// Times are seconds, sizes bytes, capacities bytes per second (doubles: the simulator's
// resolution is far finer than any latency we model).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <queue>
#include <vector>

namespace weightcast::sim {

struct NodeLink {
  double up = 0;        // bytes/s
  double down = 0;      // bytes/s; ignored when shared
  bool shared = false;  // one capacity (`up`) for both directions
  int32_t rack = -1;    // -1: not behind a rack uplink
};

struct RackLink {
  double egress = 0;   // bytes/s out of the rack
  double ingress = 0;  // bytes/s into the rack
};

using FlowId = uint32_t;

class Network {
 public:
  static constexpr double kNever = 1e300;
  Network(std::vector<NodeLink> nodes, std::vector<RackLink> racks,
          double rebalance_interval = 0.01);

  // Starts moving `bytes` from `src` to `dst` at `now`. `tag` is the caller's (returned on
  // completion).
  FlowId Start(double now, uint32_t src, uint32_t dst, double bytes, uint64_t tag);
  // Stops a flow early; returns the bytes it had moved.
  double Stop(double now, FlowId flow);
  // Changes a node's capacities (a straggler slowing down) from `now` on.
  void SetNodeLink(double now, uint32_t node, double up, double down);

  // When the next max-min recomputation is due (infinity when nothing changed since the last).
  double NextRebalance() const { return dirty_ ? last_rebalance_ + interval_ : kNever; }
  void Rebalance(double now);

  // Time the next flow finishes (kNever when none).
  double NextFinish();
  // The earlier of NextFinish() and NextRebalance().
  double NextEvent() { return std::min(NextFinish(), NextRebalance()); }
  // Runs whichever of a rebalance or a flow completion comes first; returns the completed flow,
  // or nothing for a rebalance.
  std::optional<FlowId> Step();
  // Completes the flow that finishes at NextFinish(); returns it (its tag and ends stay readable
  // until the id is reused by a later Start).
  FlowId FinishNext();

  uint64_t tag(FlowId f) const { return flows_[f].tag; }
  uint32_t src(FlowId f) const { return flows_[f].src; }
  uint32_t dst(FlowId f) const { return flows_[f].dst; }
  double bytes(FlowId f) const { return flows_[f].total; }
  double rate(FlowId f) const { return flows_[f].rate; }
  bool active(FlowId f) const { return flows_[f].active; }
  // Active flows into / out of a node (for stopping them when it dies).
  const std::vector<FlowId>& flows_out(uint32_t node) const { return res_[UpRes(node)].flows; }
  const std::vector<FlowId>& flows_in(uint32_t node) const { return res_[DownRes(node)].flows; }
  size_t active_flows() const { return active_; }
  // Bytes moved by flows that completed, and by flows stopped early.
  double delivered_bytes() const { return delivered_; }
  double aborted_bytes() const { return aborted_; }

 private:
  struct Resource {
    double capacity = 0;
    double used = 0;  // sum of the rates of its flows
    std::vector<FlowId> flows;
    // Progressive-filling scratch.
    double rem = 0;
    uint32_t unfrozen = 0;
    uint32_t version = 0;
  };
  struct Flow {
    uint32_t src = 0, dst = 0;
    uint64_t tag = 0;
    double total = 0, left = 0, rate = 0, last = 0;
    uint32_t gen = 0;
    double finish = 0;               // when it ends at its current rate (kNever at rate 0)
    uint32_t heap_pos = kNotQueued;  // index in heap_
    uint8_t nres = 0;
    bool active = false;
    uint32_t res[4] = {0, 0, 0, 0};
  };
  static constexpr uint32_t kNotQueued = UINT32_MAX;

  uint32_t UpRes(uint32_t node) const { return 2 * node; }
  uint32_t DownRes(uint32_t node) const { return shared_[node] ? 2 * node : 2 * node + 1; }
  void Detach(FlowId f, uint32_t r);
  // Settles the bytes a flow moved since its last change, then sets its new rate.
  void SetRate(double now, FlowId f, double rate);
  void Remove(FlowId f);
  void MarkDirty(double now);

  std::vector<Resource> res_;
  std::vector<uint8_t> shared_;
  std::vector<int32_t> rack_of_;
  uint32_t rack_base_ = 0;
  std::vector<Flow> flows_;
  std::vector<FlowId> free_;
  // Active flows by finish time (then id): an indexed binary heap, so a rate change moves the
  // flow's one entry instead of queueing another (a rebalance changes thousands of rates).
  bool Before(FlowId a, FlowId b) const {
    const double ta = flows_[a].finish, tb = flows_[b].finish;
    return ta < tb || (ta == tb && a < b);
  }
  void HeapPlace(uint32_t pos, FlowId f) {
    heap_[pos] = f;
    flows_[f].heap_pos = pos;
  }
  void HeapUp(uint32_t pos);
  void HeapDown(uint32_t pos);
  void HeapUpdate(FlowId f);  // insert, or move after its finish changed
  void HeapErase(FlowId f);
  std::vector<FlowId> heap_;
  size_t active_ = 0;
  double delivered_ = 0, aborted_ = 0;
  std::vector<FlowId> active_list_;  // unordered
  std::vector<uint32_t> active_pos_;
  std::vector<uint8_t> frozen_;
  double interval_;
  double last_rebalance_ = -1e300;
  bool dirty_ = false;
};

}  // namespace weightcast::sim
