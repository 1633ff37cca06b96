// The in-process carrier: the wire between the ports of one subnet that live in one process.
// Packets are queued by send() and handed to the port owning their DLID by drain(); a delivery may
// send more packets (ACKs, responses), which the same drain() delivers. Not thread-safe: the owner
// serialises every call (the live runtime holds its device lock). Lossless and in order, unless
// faults are set: then each link (the way into one LID) is a FaultInjector of its own.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "fabric/fault_injector.h"
#include "fabric/packet/packet.h"

namespace softhca::fabric {

class PacketReceiver {
 public:
  virtual ~PacketReceiver() = default;
  virtual void deliver(std::span<const uint8_t> packet) = 0;
};

class InprocCarrier {
 public:
  InprocCarrier();
  void attach(uint16_t lid, PacketReceiver* port);
  void detach(uint16_t lid);
  // Queues a copy of the packet (LRH first). Packets too short for an LRH or with an unknown DLID
  // are counted and dropped at delivery; one to a multicast LID goes to every port.
  void send(std::span<const uint8_t> packet);
  // Delivers until the queue is empty; first releases the held packets (faults) that are due.
  void drain();
  [[nodiscard]] uint64_t unroutable() const { return unroutable_; }
  [[nodiscard]] uint64_t delivered() const { return delivered_; }

  // The clock a faulty link needs: `now`, and `wake_at(t)`, a request that drain() be called at or
  // after t (a held packet is due then). Both are called under the owner's serialisation.
  struct FaultClock {
    std::function<Picoseconds()> now;
    std::function<void(Picoseconds)> wake_at;
  };
  // From now on every link is faulty as `spec` says (spec.any() false: lossless again). Link
  // "inproc/lid<N>" (the way into LID N) has its own random streams from spec.seed, so traffic on
  // one link never changes the faults of another.
  void set_faults(const FaultSpec& spec, FaultClock clock);
  // What the link into `lid` did (zero when it carried nothing or faults are off).
  [[nodiscard]] FaultCounters fault_counters(uint16_t lid) const;

 private:
  struct Slot {
    uint32_t len = 0;
    std::array<uint8_t, kMaxPacketBytes> bytes{};
  };
  void grow();
  void enqueue(std::span<const uint8_t> packet);
  FaultInjector& link_to(uint16_t dlid);
  void release_held();

  std::vector<Slot> ring_;  // circular queue; grows (doubles) only when full
  size_t head_ = 0;
  size_t count_ = 0;
  Slot current_;            // the packet being delivered (the ring may grow meanwhile)
  std::unordered_map<uint16_t, PacketReceiver*> ports_;
  uint64_t unroutable_ = 0;
  uint64_t delivered_ = 0;
  FaultSpec faults_;
  FaultClock fault_clock_;
  std::map<uint16_t, std::unique_ptr<FaultInjector>> links_;  // by DLID; only with faults
  Picoseconds wake_asked_ = Picoseconds::max();               // the earliest wake_at not yet seen
};

}  // namespace softhca::fabric
