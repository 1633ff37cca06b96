// What observing costs on the fast path: one signaled 8-byte RDMA WRITE posted and polled on an RC
// QP between two devices of a live runtime (driver API, as ibv_post_send and ibv_poll_cq reach it),
// with
//   no_tap      the default: the runtime's taps are null pointers (one predictable branch each)
//   null_tap    taps attached that do nothing: the price of the virtual calls and the sequence number
//   trace       SOFTHCA_TRACE's recorder (bounded ring, steady clock)
//   pcap        SOFTHCA_PCAP's writer into /dev/null
// Items are WRITEs. JSON: tap_bench --benchmark_format=json.
#include <benchmark/benchmark.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "driver/provider.h"
#include "fabric/capture/pcap_writer.h"
#include "runtime/pcap_tap.h"
#include "runtime/runtime.h"
#include "runtime/tap_fanout.h"
#include "runtime/trace_recorder.h"

namespace softhca {
namespace {

class NullTap final : public runtime::TlpTap, public runtime::PacketTap {
 public:
  void on_tlp(uint64_t, uint32_t, const pcie::Tlp&) override {}
  void on_packet(uint64_t, uint32_t, runtime::PacketDirection, std::span<const uint8_t>) override {}
};

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

// One side: context, PD, 4 KiB registered buffer, CQ and RC QP on one device of the runtime.
struct Side {
  ibv_device device{};
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
  uint16_t lid = 0;

  void open(runtime::DeviceSlot& slot) {
    driver::DeviceLink link;
    link.host_port = &slot.host_port();
    link.cmd = &slot.commands();
    link.uar_index = slot.acquire_uar();
    link.blueflame = driver::BlueFlameMode::kOff;
    link.kernel = &slot.kernel();
    ctx = &driver::open_context(&device, link, -1)->context;
    pd = driver::alloc_pd(ctx);
    check(pd != nullptr, "alloc_pd");
    mr = driver::reg_mr(pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()),
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    check(mr != nullptr, "reg_mr");
    cq = driver::create_cq(ctx, 64, nullptr, 0);
    check(cq != nullptr, "create_cq");
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 1;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp = driver::create_qp(pd, &init, 0);
    check(qp != nullptr, "create_qp");
    ibv_port_attr port{};
    check(driver::query_port(ctx, 1, &port, sizeof port) == 0, "query_port");
    lid = port.lid;
  }

  void connect(const Side& peer) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    check(driver::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
          "INIT");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = peer.qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = peer.lid;
    a.ah_attr.port_num = 1;
    check(driver::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
          "RTR");
    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    check(driver::modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                        IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
          "RTS");
  }

  void close() {
    driver::destroy_qp(qp);
    driver::destroy_cq(cq);
    driver::dereg_mr(mr);
    driver::dealloc_pd(pd);
    driver::close_context(ctx);
  }
};

enum class Observer { kNone, kNullTap, kTrace, kPcap };

void BM_PostPollWrite(benchmark::State& state, Observer observer) {
  NullTap null_tap;
  runtime::SteadyTapClock clock;
  runtime::TraceRecorder recorder(clock, 100'000);
  runtime::TapFanout fanout;
  std::unique_ptr<runtime::PcapTap> pcap;
  runtime::RuntimeOptions o;
  o.num_devices = 2;
  switch (observer) {
    case Observer::kNone: break;
    case Observer::kNullTap:
      o.tlp_tap = &null_tap;
      o.packet_tap = &null_tap;
      break;
    case Observer::kTrace:
      o.tlp_tap = &recorder;
      o.packet_tap = &recorder;
      break;
    case Observer::kPcap: {
      std::string error;
      pcap = std::make_unique<runtime::PcapTap>(fabric::PcapWriter::open("/dev/null", error), clock);
      o.packet_tap = pcap.get();
      break;
    }
  }
  auto rt = runtime::Runtime::create(o);
  Side a;
  Side b;
  a.open(*rt->devices()[0]);
  b.open(*rt->devices()[1]);
  a.connect(b);
  b.connect(a);

  ibv_sge sge{reinterpret_cast<uintptr_t>(a.buf.data()), 8, a.mr->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(b.buf.data());
  wr.wr.rdma.rkey = b.mr->rkey;
  ibv_wc wc{};
  for (auto _ : state) {
    ibv_send_wr* bad = nullptr;
    if (driver::post_send(a.qp, &wr, &bad) != 0) {
      state.SkipWithError("post_send failed");
      break;
    }
    while (driver::poll_cq(a.cq, 1, &wc) == 0) {
    }
    if (wc.status != IBV_WC_SUCCESS) {
      state.SkipWithError("completion failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  a.close();
  b.close();
}
BENCHMARK_CAPTURE(BM_PostPollWrite, no_tap, Observer::kNone);
BENCHMARK_CAPTURE(BM_PostPollWrite, null_tap, Observer::kNullTap);
BENCHMARK_CAPTURE(BM_PostPollWrite, trace, Observer::kTrace);
BENCHMARK_CAPTURE(BM_PostPollWrite, pcap, Observer::kPcap);

}  // namespace
}  // namespace softhca
