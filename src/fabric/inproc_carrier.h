// The in-process carrier: the wire between the ports of one subnet that live in one process.
// Packets are queued by send() and handed to the port owning their DLID by drain(); a delivery may
// send more packets (ACKs, responses), which the same drain() delivers. Not thread-safe: the owner
// serialises every call (the live runtime holds its device lock). Lossless and in order.
#pragma once
#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

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
  // are counted and dropped at delivery.
  void send(std::span<const uint8_t> packet);
  // Delivers until the queue is empty.
  void drain();
  [[nodiscard]] uint64_t unroutable() const { return unroutable_; }
  [[nodiscard]] uint64_t delivered() const { return delivered_; }

 private:
  struct Slot {
    uint32_t len = 0;
    std::array<uint8_t, kMaxPacketBytes> bytes{};
  };
  void grow();

  std::vector<Slot> ring_;  // circular queue; grows (doubles) only when full
  size_t head_ = 0;
  size_t count_ = 0;
  Slot current_;            // the packet being delivered (the ring may grow meanwhile)
  std::unordered_map<uint16_t, PacketReceiver*> ports_;
  uint64_t unroutable_ = 0;
  uint64_t delivered_ = 0;
};

}  // namespace softhca::fabric
