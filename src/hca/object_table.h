// A table of device objects addressed by number (PDN, CQN, QPN, ...), stored in the device region:
// a slot array laid out when the region is formatted, objects from the region heap, slots reused
// through a LIFO free list (QPs: only once every slot was used, Reuse::kAfterFresh), numbers = first_number + slot. Each slot records the owner (the process
// that created the object) so a dead owner's objects can be found. The ObjectTable object itself is
// a per-process view (region base + the table's state in the region). Control path allocates;
// lookups are O(1). Under the device lock.
#pragma once
#include <cstdint>
#include <new>
#include <type_traits>

#include "hca/region_heap.h"

namespace softhca::hca {

inline constexpr uint32_t kNoSlot = 0xffffffff;

// A table's bookkeeping, stored in the region.
struct TableState {
  uint64_t slots = 0;  // region offset of the TableSlot array (capacity entries)
  uint32_t first = 0;
  uint32_t capacity = 0;
  uint32_t high_water = 0;  // slots ever used; only these are initialised
  uint32_t live = 0;
  uint32_t free_head = kNoSlot;
};
struct TableSlot {
  uint64_t object = kHeapNone;  // region offset of the object; kHeapNone = free
  uint32_t owner = 0;
  uint32_t next_free = kNoSlot;
};
static_assert(std::is_trivially_copyable_v<TableState> && std::is_trivially_copyable_v<TableSlot>);

template <class T>
class ObjectTable {
  // Stored in a region other processes map at other addresses: plain bytes only.
  static_assert(std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>,
                "objects in the device region must be trivially copyable");

 public:
  // Reuse::kAfterFresh: numbers never used yet are handed out before freed ones, as a CA's QPNs
  // advance rather than come straight back (a peer's CM keeps a closed connection's QPN in
  // time-wait and refuses a REQ from it as stale, IBA 12.9.8.3). kLifo: the last freed first.
  enum class Reuse : uint8_t { kLifo, kAfterFresh };
  ObjectTable(RegionHeap& heap, TableState& state, Reuse reuse = Reuse::kLifo)
      : heap_(heap), st_(state), reuse_(reuse) {}

  static constexpr uint64_t slot_bytes(uint32_t capacity) { return uint64_t{capacity} * sizeof(TableSlot); }
  static void format(TableState& st, uint32_t first_number, uint32_t capacity, uint64_t slots_offset) {
    st = TableState{slots_offset, first_number, capacity, 0, 0, kNoSlot};
  }

  // A new value-initialised object tagged with `owner`; returns its number, or 0 with *out =
  // nullptr when the table or the region is full.
  uint32_t insert(uint32_t owner, T** out = nullptr) {
    if (out) *out = nullptr;
    const bool fresh = st_.high_water < st_.capacity;
    const bool reuse = st_.free_head != kNoSlot && (reuse_ == Reuse::kLifo || !fresh);
    if (!reuse && !fresh) return 0;
    const uint64_t obj = heap_.allocate(sizeof(T));
    if (obj == kHeapNone) return 0;
    uint32_t slot;
    if (reuse) {
      slot = st_.free_head;
      st_.free_head = slots()[slot].next_free;
    } else {
      slot = st_.high_water++;
    }
    slots()[slot] = TableSlot{obj, owner, kNoSlot};
    T* p = new (heap_.at<void>(obj)) T{};
    if (out) *out = p;
    ++st_.live;
    return st_.first + slot;
  }

  [[nodiscard]] T* find(uint32_t number) const {
    if (number < st_.first) return nullptr;
    const uint32_t slot = number - st_.first;
    if (slot >= st_.high_water || slots()[slot].object == kHeapNone) return nullptr;
    return heap_.at<T>(slots()[slot].object);
  }

  [[nodiscard]] uint32_t owner_of(uint32_t number) const {
    return find(number) ? slots()[number - st_.first].owner : 0;
  }

  bool erase(uint32_t number) {
    if (!find(number)) return false;
    const uint32_t slot = number - st_.first;
    heap_.release(slots()[slot].object, sizeof(T));
    slots()[slot] = TableSlot{kHeapNone, 0, st_.free_head};
    st_.free_head = slot;
    --st_.live;
    return true;
  }

  // f(number, object) for every live object, in slot order. f may erase the object it is given.
  template <class F>
  void for_each(F&& f) const {
    for (uint32_t i = 0; i < st_.high_water; ++i)
      if (slots()[i].object != kHeapNone) f(st_.first + i, *heap_.at<T>(slots()[i].object));
  }
  // The numbers of `owner`'s objects, in slot order; f may erase the object it is given.
  template <class F>
  void for_each_of(uint32_t owner, F&& f) const {
    for (uint32_t i = 0; i < st_.high_water; ++i)
      if (slots()[i].object != kHeapNone && slots()[i].owner == owner) f(st_.first + i);
  }

  [[nodiscard]] uint32_t live() const { return st_.live; }

 private:
  [[nodiscard]] TableSlot* slots() const { return heap_.at<TableSlot>(st_.slots); }

  RegionHeap& heap_;
  TableState& st_;
  Reuse reuse_;
};

}  // namespace softhca::hca
