// The host kernel and the host bridge of live mode across processes (docs/live-mode.md): DMA
// memory and pinning go to this process's MemoryPublisher (windows of memfd-backed pages published
// in the host segment), DMA addresses of any process of the host resolve through PeerMemory, and
// interrupt vectors are the abstract Unix datagram sockets of IrqSockets.
// DMA addresses are (slot << 52) | va with slot >= 1; slot 0 (the identity bridge's pointers) is
// refused here: no process of a shared device may hand the device a bare pointer.
#pragma once
#include <cstdint>
#include <span>

#include "pcie/host_bridge.h"
#include "pcie/host_kernel.h"
#include "runtime/irq_socket.h"
#include "runtime/memory_publisher.h"
#include "runtime/peer_memory.h"

namespace softhca::runtime {

// Thread-safe as its parts are: MemoryPublisher locks internally, IrqSockets is lock-free.
class SharedKernel final : public pcie::HostKernel {
 public:
  SharedKernel(MemoryPublisher& memory, IrqSockets& irq) : memory_(memory), irq_(irq) {}
  pcie::DmaMemory alloc_coherent(size_t bytes) override { return memory_.alloc_coherent(bytes); }
  void free_coherent(const pcie::DmaMemory& memory) override { memory_.free_coherent(memory); }
  uint64_t pin_user(const void* addr, size_t len, pcie::PinAccess access) override {
    return memory_.pin(addr, len, access);
  }
  void unpin_user(uint64_t dma_addr, size_t len) override { memory_.unpin(dma_addr, len); }
  int alloc_vector(uint64_t* vector) override { return irq_.alloc_vector(vector); }
  void free_vector(uint64_t vector, int fd) override { irq_.free_vector(vector, fd); }
  int wait_vector(int fd) override { return IrqSockets::wait_vector(fd); }
  void clear_vector(int fd) override { IrqSockets::clear_vector(fd); }
  void raise_vector(uint64_t vector, int /*fd*/) override { irq_.deliver(vector); }

 private:
  MemoryPublisher& memory_;
  IrqSockets& irq_;
};

// Used by the device, under the device lock (PeerMemory is not thread-safe by itself).
// Interrupts raised while a thread holds the device lock are delivered when it has let go
// (hold_interrupts / release_interrupts around each device entry): a waiter woken by one would
// otherwise run at once — the kernel lets a woken thread preempt its waker — and spin on the lock
// its waker still holds, and a woken thread in another process needs that lock first thing (to
// re-arm its CQ). Each thread holds and releases its own.
class SharedBridge final : public pcie::HostBridge {
 public:
  SharedBridge(PeerMemory& peers, IrqSockets& irq) : peers_(peers), irq_(irq) {}
  std::span<uint8_t> map(uint64_t dma_addr, size_t len) override;
  void deliver_msi(uint64_t vector) override;
  void hold_interrupts();
  void release_interrupts();  // after the device lock is released: delivers what was held
  // DMA addresses refused because they carried slot 0.
  [[nodiscard]] uint64_t refused() const { return refused_; }

 private:
  PeerMemory& peers_;
  IrqSockets& irq_;
  uint64_t refused_ = 0;
};

}  // namespace softhca::runtime
