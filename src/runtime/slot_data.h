// What the host segment keeps for each process slot (HostSegment::slot_data, docs/live-mode.md):
// the memory the process registered, for peers to map (range_table.h), and the PCIe counters of
// the device work its threads did, for `softhca stats --live` (docs/observability.md). Plain data,
// no pointers; a zeroed block is an empty table and zero counts (the segment zeroes a slot's block
// when the slot is freed).
#pragma once
#include <type_traits>

#include "pcie/counters.h"
#include "runtime/range_table.h"

namespace softhca::runtime {

struct SlotData {
  RangeTable ranges;
  pcie::CounterCells pcie;
};
static_assert(std::is_standard_layout_v<SlotData>);

}  // namespace softhca::runtime
