// libFuzzer target: bytes -> the CM MAD decoder of src/cm (mad_codec.h), then the connection table.
// decode() must return for any input without reading outside it (ASan) or undefined behaviour
// (UBSan); a MAD that decodes must encode to bytes that decode to the same MAD (the round trip of
// STYLE.md 7). The decoded MAD is then handed to a ConnectionTable with listeners and a connection
// waiting for its REP, and its timers are run out: every MAD the table sends must decode.
//
// Input: the MAD itself (the seeds in corpus/cm_mad_fuzz are 256-byte CM MADs).
#include <cstddef>
#include <cstdint>
#include <span>

#include "cm/cma_header.h"
#include "cm/connection_table.h"
#include "cm/mad_codec.h"
#include "fuzz_check.h"

namespace softhca::fuzz {
namespace {

void check_sends(const cm::Actions& a) {
  for (const cm::MadToSend& m : a.mads) {
    cm::CmMad out;
    check(cm::decode(m.mad, out) == cm::DecodeStatus::kOk, "every MAD the CM sends decodes");
  }
}

void drive_table(const cm::CmMad& mad) {
  cm::ConnectionTable table(cm::ConnectionConfig{0x0002c90300000001, 1, false}, 1);
  (void)table.listen(cm::service_id_of(cm::PortSpace::kTcp, 7471));
  (void)table.listen(cm::service_id_of(cm::PortSpace::kUdp, 7174));
  cm::Req req;
  req.service_id = cm::service_id_of(cm::PortSpace::kTcp, 7471);
  req.max_cm_retries = 2;
  req.remote_cm_response_timeout = 8;
  check_sends(table.create().connect(Picoseconds(0), req, 8));  // comm id 1, REQ sent
  check_sends(table.receive(Picoseconds(0), mad, 0));
  // Run every timer out: retransmissions, exhaustion, timewait.
  for (int i = 0; i < 64; ++i) {
    const std::optional<Picoseconds> next = table.next_deadline();
    if (!next) break;
    for (const cm::Actions& a : table.on_timer(*next)) check_sends(a);
  }
}

}  // namespace
}  // namespace softhca::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace softhca;
  cm::CmMad mad;
  if (cm::decode(std::span<const uint8_t>(data, size), mad) != cm::DecodeStatus::kOk) return 0;
  const cm::MadBytes bytes = cm::encode(mad);
  cm::CmMad again;
  fuzz::check(cm::decode(bytes, again) == cm::DecodeStatus::kOk, "an encoded MAD decodes");
  fuzz::check(again == mad, "decode(encode(m)) == m");
  fuzz::check(cm::encode(again) == bytes, "encode is a function of the decoded fields");
  fuzz::drive_table(mad);
  return 0;
}
