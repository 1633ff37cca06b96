// What a device is: its identity, limits and port, chosen when it is created. Defaults describe a
// ConnectX-class EDR HCA as perftest and pyverbs expect to see it (docs/device.md gives each value
// and its reason).
#pragma once
#include <cstdint>

#include "hwif/caps.h"
#include "pcie/pcie_config.h"

namespace softhca::hca {

struct DeviceConfig {
  hwif::DeviceCaps caps;
  hwif::PortCaps port;
  pcie::PcieConfig pcie;
};

// The default configuration of device number `index` on a fabric: LID index+1, GUID derived from
// the fabric id and index, so two devices never share either.
DeviceConfig default_device_config(uint32_t index, uint32_t fabric_id = 0);

}  // namespace softhca::hca
