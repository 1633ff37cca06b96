#include "runtime/chrome_trace.h"

#include <cstdio>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "fabric/packet/opcode.h"

namespace softhca::runtime {

namespace {

std::string device_name(const ChromeTraceInfo& info, uint32_t device) {
  if (device < info.device_names.size() && !info.device_names[device].empty()) return info.device_names[device];
  return "softhca_" + std::to_string(device);
}

int pid_of(uint32_t device) { return static_cast<int>(device) + 1; }

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// [us] with picosecond resolution.
double micros(Picoseconds t) { return static_cast<double>(t.count()) / 1e6; }

nlohmann::json tlp_event(const TraceEvent& e) {
  const pcie::Tlp& t = e.tlp;
  nlohmann::json args = {{"type", pcie::to_string(t.type)},
                         {"cause", pcie::to_string(t.cause)},
                         {"direction", pcie::to_string(t.dir)},
                         {"address", hex(t.address)},
                         {"payload_bytes", t.payload_bytes},
                         {"wire_bytes", t.wire_bytes},
                         {"seq", e.seq}};
  if (t.type == pcie::TlpType::kMRd) args["read_bytes"] = t.read_bytes;
  return {{"name", std::string(pcie::to_string(t.cause)) + " " + std::string(pcie::to_string(t.type))},
          {"cat", "pcie"},
          {"ph", "i"},
          {"s", "t"},
          {"ts", micros(e.time)},
          {"pid", pid_of(e.device)},
          {"tid", static_cast<uint32_t>(track_of(e))},
          {"args", args}};
}

nlohmann::json packet_event(const TraceEvent& e) {
  const fabric::PacketSummary& p = e.packet;
  nlohmann::json args = {{"direction", e.packet_dir == PacketDirection::kSent ? "sent" : "received"},
                         {"psn", p.psn},
                         {"dest_qp", p.dest_qp},
                         {"slid", p.slid},
                         {"dlid", p.dlid},
                         {"ack_req", p.ack_req},
                         {"wire_bytes", p.wire_bytes},
                         {"seq", e.seq}};
  if (p.has_aeth) {
    args["aeth_syndrome"] = hex(p.syndrome);
    args["msn"] = p.msn;
  }
  std::string name = "packet";
  if (p.valid) {
    name = std::string(fabric::opcode_name(static_cast<fabric::BthOpcode>(p.opcode)));
    args["opcode"] = hex(p.opcode);
  }
  return {{"name", name},
          {"cat", "packet"},
          {"ph", "i"},
          {"s", "t"},
          {"ts", micros(e.time)},
          {"pid", pid_of(e.device)},
          {"tid", static_cast<uint32_t>(track_of(e))},
          {"args", args}};
}

std::string_view cpu_event_name(CpuEventKind k) {
  switch (k) {
    case CpuEventKind::kPostSend: return "post_send";
    case CpuEventKind::kPollHit: return "poll_cq hit";
    case CpuEventKind::kDoorbell: return "ring doorbell";
    case CpuEventKind::kBlueFlame: return "BlueFlame write";
  }
  return "cpu";
}

nlohmann::json cpu_event(const TraceEvent& e) {
  const CpuEventInfo& c = e.cpu;
  nlohmann::json args = nlohmann::json::object();
  switch (c.what) {
    case CpuEventKind::kPostSend: args = {{"qpn", hex(c.object)}, {"work_requests", c.count}}; break;
    case CpuEventKind::kPollHit: args = {{"cqn", hex(c.object)}, {"completions", c.count}}; break;
    case CpuEventKind::kDoorbell:
    case CpuEventKind::kBlueFlame: args = {{"device", c.object}, {"seq", e.seq}}; break;
  }
  return {{"name", cpu_event_name(c.what)},
          {"cat", "cpu"},
          {"ph", "i"},
          {"s", "t"},
          {"ts", micros(e.time)},
          {"pid", kCpuThreadsPid},
          {"tid", c.tid},
          {"args", args}};
}

nlohmann::json metadata(const char* what, int pid, uint32_t tid, const nlohmann::json& args) {
  return {{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", args}};
}

}  // namespace

TraceTrack track_of(const TraceEvent& e) {
  if (e.kind == TraceEventKind::kPacket) {
    return e.packet_dir == PacketDirection::kSent ? TraceTrack::kWire : TraceTrack::kHca;
  }
  return e.tlp.dir == pcie::Direction::kDownstream ? TraceTrack::kPcieDownstream : TraceTrack::kPcieUpstream;
}

std::string_view to_string(TraceTrack t) {
  switch (t) {
    case TraceTrack::kPcieDownstream: return "PCIe downstream";
    case TraceTrack::kPcieUpstream: return "PCIe upstream";
    case TraceTrack::kHca: return "HCA";
    case TraceTrack::kWire: return "wire";
  }
  return "?";
}

std::string chrome_trace_json(std::span<const TraceEvent> events, const ChromeTraceInfo& info) {
  std::set<uint32_t> devices;
  for (uint32_t d = 0; d < info.device_names.size(); ++d) devices.insert(d);
  for (const TraceEvent& e : events) devices.insert(e.device);

  nlohmann::json list = nlohmann::json::array();
  for (uint32_t d : devices) {
    const int pid = pid_of(d);
    list.push_back(metadata("process_name", pid, 0, {{"name", device_name(info, d)}}));
    list.push_back(metadata("process_sort_index", pid, 0, {{"sort_index", pid}}));
    for (TraceTrack t : {TraceTrack::kPcieDownstream, TraceTrack::kPcieUpstream, TraceTrack::kHca, TraceTrack::kWire}) {
      const auto tid = static_cast<uint32_t>(t);
      list.push_back(metadata("thread_name", pid, tid, {{"name", to_string(t)}}));
      list.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
    }
  }
  std::set<uint32_t> threads;
  for (const TraceEvent& e : events)
    if (e.kind == TraceEventKind::kCpu) threads.insert(e.cpu.tid);
  if (!threads.empty()) {
    list.push_back(metadata("process_name", kCpuThreadsPid, 0, {{"name", "CPU threads"}}));
    list.push_back(metadata("process_sort_index", kCpuThreadsPid, 0, {{"sort_index", 0}}));
    for (uint32_t tid : threads) list.push_back(metadata("thread_name", kCpuThreadsPid, tid, {{"name", "thread " + std::to_string(tid)}}));
  }
  for (const TraceEvent& e : events) {
    switch (e.kind) {
      case TraceEventKind::kTlp: list.push_back(tlp_event(e)); break;
      case TraceEventKind::kPacket: list.push_back(packet_event(e)); break;
      case TraceEventKind::kCpu: list.push_back(cpu_event(e)); break;
    }
  }

  const nlohmann::json doc = {{"traceEvents", list},
                              {"displayTimeUnit", "ns"},
                              {"otherData",
                               {{"generator", "softhca"},
                                {"clock", info.clock},
                                {"max_events", info.max_events},
                                {"dropped_events", info.dropped_events}}}};
  return doc.dump(1);
}

bool write_chrome_trace(const std::string& path, std::span<const TraceEvent> events, const ChromeTraceInfo& info) {
  std::ofstream out(path);
  out << chrome_trace_json(events, info) << "\n";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace softhca::runtime
