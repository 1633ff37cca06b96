// Presenting the device view to the program `softhca run` starts (docs/device-view.md): a mount
// namespace of its own (and, for a user without CAP_SYS_ADMIN, a user namespace that maps the
// user to itself, so getuid() does not change), in which the sysfs tree of sysfs_tree.h lies
// over /sys/class and /sys/devices (overlayfs, read-only, the real entries still visible) and /dev gains infiniband/uverbs<N> (a character device: /dev/null bound there).
// Nothing changes outside the namespace; no PID, IPC or network namespace is made, so /proc, shared
// memory, signals, ptrace and sockets are those of the machine.
#pragma once
#include <string>
#include <vector>

#include "view/device_facts.h"

namespace softhca::view {

// Enters a new mount namespace for this process (and the program it will exec) and lays the view
// of `devices` out in it. On failure nothing of the view is in place (the process may be in a new,
// unchanged namespace) and `error` says why.
[[nodiscard]] bool enter_device_view(const std::vector<DeviceFacts>& devices, std::string& error);

}  // namespace softhca::view
