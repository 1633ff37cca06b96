// The sysfs fragment of the device view (docs/device-view.md): class/infiniband, infiniband_verbs,
// infiniband_mad, a PCI function per device under devices/pci0000:ff and its bus/pci and
// class/pci_bus links, laid out as the Linux kernel's rdma core and PCI core lay theirs out, with
// the values of DeviceFacts. Relative symbolic links, so the tree works wherever it is overlaid on
// /sys. Plain files only: a read never fails the way some kernel attributes do.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "view/device_facts.h"

namespace softhca::view {

// The PCI address device `index` of the view has (function 0 of device `index` on bus ff, a bus
// number no real function of these machines uses).
[[nodiscard]] std::string pci_address(size_t index);

// Writes the tree under `root` (which must exist): root/class/..., root/devices/..., root/bus/....
// False with `error` naming the path that could not be written.
[[nodiscard]] bool write_sysfs_tree(const std::filesystem::path& root, const std::vector<DeviceFacts>& devices,
                                    std::string& error);

}  // namespace softhca::view
