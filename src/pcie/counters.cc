#include "pcie/counters.h"

#include <nlohmann/json.hpp>

namespace softhca::pcie {

Direction direction_of(TlpType t, TlpCause c) {
  // Requests go from whoever issues them; a completion goes back the other way.
  const Direction request = is_cpu_cause(c) ? Direction::kDownstream : Direction::kUpstream;
  switch (t) {
    case TlpType::kMRd:
    case TlpType::kMWr: return request;
    case TlpType::kCplD: return request == Direction::kDownstream ? Direction::kUpstream : Direction::kDownstream;
  }
  return Direction::kUpstream;
}

CounterCell CounterSnapshot::by_cause(TlpCause c) const {
  CounterCell sum;
  for (int t = 0; t < kTlpTypeCount; ++t) sum += at(static_cast<TlpType>(t), c);
  return sum;
}

CounterCell CounterSnapshot::by_type(TlpType t) const {
  CounterCell sum;
  for (int c = 0; c < kTlpCauseCount; ++c) sum += at(t, static_cast<TlpCause>(c));
  return sum;
}

CounterCell CounterSnapshot::total() const {
  CounterCell sum;
  for (int t = 0; t < kTlpTypeCount; ++t) sum += by_type(static_cast<TlpType>(t));
  return sum;
}

uint64_t CounterSnapshot::wire_bytes(Direction d) const {
  uint64_t sum = 0;
  for (int t = 0; t < kTlpTypeCount; ++t) {
    for (int c = 0; c < kTlpCauseCount; ++c) {
      auto type = static_cast<TlpType>(t);
      auto cause = static_cast<TlpCause>(c);
      if (direction_of(type, cause) == d) sum += at(type, cause).wire_bytes;
    }
  }
  return sum;
}

CounterSnapshot CounterSnapshot::operator-(const CounterSnapshot& base) const {
  CounterSnapshot d = *this;
  for (size_t t = 0; t < cells_.size(); ++t) {
    for (size_t c = 0; c < cells_[t].size(); ++c) {
      d.cells_[t][c].tlps -= base.cells_[t][c].tlps;
      d.cells_[t][c].payload_bytes -= base.cells_[t][c].payload_bytes;
      d.cells_[t][c].wire_bytes -= base.cells_[t][c].wire_bytes;
    }
  }
  return d;
}

CounterSnapshot& CounterSnapshot::operator+=(const CounterSnapshot& other) {
  for (size_t t = 0; t < cells_.size(); ++t) {
    for (size_t c = 0; c < cells_[t].size(); ++c) cells_[t][c] += other.cells_[t][c];
  }
  return *this;
}

std::string CounterSnapshot::to_json() const {
  nlohmann::json tlps = nlohmann::json::array();
  for (int t = 0; t < kTlpTypeCount; ++t) {
    for (int c = 0; c < kTlpCauseCount; ++c) {
      auto type = static_cast<TlpType>(t);
      auto cause = static_cast<TlpCause>(c);
      const CounterCell& cell = at(type, cause);
      if (cell.tlps == 0) continue;
      tlps.push_back({{"type", to_string(type)},
                      {"cause", to_string(cause)},
                      {"direction", to_string(direction_of(type, cause))},
                      {"tlps", cell.tlps},
                      {"payload_bytes", cell.payload_bytes},
                      {"wire_bytes", cell.wire_bytes}});
    }
  }
  nlohmann::json j = {{"tlps", tlps},
                      {"wire_bytes_downstream", wire_bytes(Direction::kDownstream)},
                      {"wire_bytes_upstream", wire_bytes(Direction::kUpstream)}};
  return j.dump(2);
}

void Counters::on_tlp(const Tlp& tlp) {
  CounterCells::Cell& cell = cells_->cells[static_cast<size_t>(tlp.type)][static_cast<size_t>(tlp.cause)];
  cell.tlps.fetch_add(1, std::memory_order_relaxed);
  cell.payload_bytes.fetch_add(tlp.payload_bytes, std::memory_order_relaxed);
  cell.wire_bytes.fetch_add(tlp.wire_bytes, std::memory_order_relaxed);
}

void Counters::on_tlp_run(const TlpRun& run) {
  if (run.tlps == 0) return;
  CounterCells::Cell& cell = cells_->cells[static_cast<size_t>(run.type)][static_cast<size_t>(run.cause)];
  cell.tlps.fetch_add(run.tlps, std::memory_order_relaxed);
  // Read requests carry no payload: no locked add of nothing on every DMA read.
  if (run.payload_bytes != 0) cell.payload_bytes.fetch_add(run.payload_bytes, std::memory_order_relaxed);
  cell.wire_bytes.fetch_add(run.wire_bytes, std::memory_order_relaxed);
}

CounterSnapshot CounterCells::snapshot() const {
  CounterSnapshot s;
  for (int t = 0; t < kTlpTypeCount; ++t) {
    for (int c = 0; c < kTlpCauseCount; ++c) {
      const Cell& a = cells[static_cast<size_t>(t)][static_cast<size_t>(c)];
      CounterCell& out = s.at(static_cast<TlpType>(t), static_cast<TlpCause>(c));
      out.tlps = a.tlps.load(std::memory_order_relaxed);
      out.payload_bytes = a.payload_bytes.load(std::memory_order_relaxed);
      out.wire_bytes = a.wire_bytes.load(std::memory_order_relaxed);
    }
  }
  return s;
}

void CounterCells::reset() {
  for (auto& row : cells) {
    for (Cell& a : row) {
      a.tlps.store(0, std::memory_order_relaxed);
      a.payload_bytes.store(0, std::memory_order_relaxed);
      a.wire_bytes.store(0, std::memory_order_relaxed);
    }
  }
}

}  // namespace softhca::pcie
