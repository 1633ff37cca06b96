// The send pipeline of one QP, as explicit stages (STYLE.md 5):
//   fetch    DMA-read new WQEs from the send ring (one read per contiguous ring segment), or take
//            a WQE written by BlueFlame with no read at all;
//   prepare  decode the WQE, check it against the QP type and limits, check local keys;
//   execute  hand it to the requester transport (packets go out);
//   complete done by the transport when ACKs/responses arrive (UC/UD: at once).
// A DMA fault reading the ring puts the QP in error (its fetched WQEs are flushed).
// Data path: no allocation, no logging. Runs under the device lock.
#pragma once
#include <cstdint>
#include <span>

#include "hca/device.h"

namespace softhca::hca {

class Requester;

class SendPipeline {
 public:
  SendPipeline(Device& dev, QueuePair& qp) : dev_(dev), qp_(qp) {}

  // Doorbell: WQEs up to (not including) basic block `producer` are posted.
  void on_doorbell(uint16_t producer);
  // BlueFlame: the bytes of one WQE, written through the BAR.
  void on_blueflame(std::span<const uint8_t> wqe);
  // Executes what is fetched, as far as the QP's state and limits allow.
  void run();
  // QP in error: every fetched and posted WQE not yet completed completes with a flush error.
  void flush();

 private:
  // Reads posted WQEs into the shadow ring; false on a DMA fault (the QP must go to error).
  bool fetch();
  enum class Prepared : uint8_t { kReady, kStall, kFailed };
  Prepared prepare(SendRecord& rec);
  // The record of the WQE just decoded at basic block `bb`, made ready for its checks: the
  // transport's fields afresh (no first SGE address yet), the WQE's position, signaled when the
  // QP signals all. Not `rec = SendRecord{}`: that clears ~1 KiB of SGE slots per WQE; the decoder
  // sets every field but the SGEs, and num_sge says how many of those are live.
  void start_record(SendRecord& rec, uint16_t bb) const {
    rec.first_psn = 0;
    rec.npkts = 1;
    rec.response_done = false;
    rec.resp_received = 0;
    rec.executed = false;
    rec.sge0_host_addr = 0;
    rec.wqe.wqe_index = bb;
    rec.wqe.signaled = rec.wqe.signaled || qp_.sq_sig_all;
  }
  bool local_keys_ok(SendRecord& rec);  // also sets rec.sge0_host_addr (start_record() zeroed it)
  void fail(const SendRecord& rec);
  void run_loop(Requester& requester);  // run()'s WQE loop
  // A run of small WRITEs (docs/live-mode.md, "Runs of small WRITEs"): when the requester can
  // send new WRITEs express (Requester::write_run_room()), the WQEs from exec on that are plain
  // WRITEs of one packet are prepared together, then executed together. false when none went:
  // the WQE at exec then takes the per-WQE path.
  bool run_writes(Requester& requester);
  // prepare() for up to `max` WQEs from exec on, stopping at the first that is not a plain WRITE
  // (decode_plain_write()) of one packet ready to go: another shape, a length or local key
  // prepare() would refuse, a fence it would stall on, more blocks than were posted. Returns how
  // many are ready, each in its record as prepare() leaves it.
  uint32_t prepare_plain_writes(uint32_t max);

  Device& dev_;
  QueuePair& qp_;
  hwif::CqeSyndrome syndrome_ = hwif::CqeSyndrome::kLocQpOpErr;  // why prepare() failed
  KeyCache local_keys_;  // the last local key the WQEs of this doorbell gathered through
};

}  // namespace softhca::hca
