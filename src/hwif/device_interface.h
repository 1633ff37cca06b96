// The two ways a driver reaches its device: the BAR (posted writes of doorbells, BlueFlame and CQ
// arming; writes and reads of device memory) and the command interface (create/modify/destroy). The driver holds only these
// interfaces; the device model implements them. Neither side includes the other.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "hwif/cmd.h"

namespace softhca::hwif {

class MmioTarget {
 public:
  virtual ~MmioTarget() = default;
  // A posted write of len bytes at byte offset bar_offset of BAR 0. Returns when the device has
  // accepted the write (in live mode: when the work it triggers has been done).
  virtual void mmio_write(uint64_t bar_offset, const void* data, size_t len) = 0;
  // A read of len bytes at bar_offset (device memory is the only readable part of the BAR). By
  // default nothing answers: all ones, as a read that completes with Unsupported Request gives.
  virtual void mmio_read(uint64_t bar_offset, void* dst, size_t len) {
    (void)bar_offset;
    std::memset(dst, 0xff, len);
  }
};

class CommandInterface {
 public:
  virtual ~CommandInterface() = default;
  // Executes one command. Returns 0 or a positive errno (the status the device reports).
  virtual int execute(CmdOpcode op, const void* in, size_t in_len, void* out, size_t out_len) = 0;
};

template <class In, class Out>
int exec_cmd(CommandInterface& cmd, const In& in, Out& out) {
  return cmd.execute(In::kOpcode, &in, sizeof(In), &out, sizeof(Out));
}
template <class In>
int exec_cmd(CommandInterface& cmd, const In& in) {
  NoOut out;
  return cmd.execute(In::kOpcode, &in, sizeof(In), &out, 0);
}

}  // namespace softhca::hwif
