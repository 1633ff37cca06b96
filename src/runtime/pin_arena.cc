#include "runtime/pin_arena.h"

#include <iterator>

namespace softhca::runtime {

int PinArena::place(uint64_t va, uint64_t len, const Holes& holes) const {
  const uint64_t off = offset_for(va);
  if (len == 0 || len > kLargestRun || off + len > kChunkBytes) return kNever;
  const uint64_t delta = va - off;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const Counts& m = chunks_[i].counts;
    auto it = m.lower_bound(off);
    if (it != m.begin() && std::prev(it)->second.end > off) --it;
    bool clash = false;
    bool reserved = false;  // only va's own reservations overlap
    for (; it != m.end() && it->first < off + len; ++it) {
      if (it->second.delta != delta) {
        clash = true;
        break;
      }
      reserved = true;
    }
    if (!clash && (!reserved || holes(static_cast<uint32_t>(i), off, off + len))) return static_cast<int>(i);
  }
  return kNoRoom;
}

uint32_t PinArena::add_chunk(const Chunk& c) {
  chunks_.push_back(Entry{c, {}});
  return static_cast<uint32_t>(chunks_.size() - 1);
}

int PinArena::chunk_of_inode(uint64_t inode) const {
  for (size_t i = 0; i < chunks_.size(); ++i)
    if (chunks_[i].c.inode == inode) return static_cast<int>(i);
  return -1;
}

int PinArena::chunk_of_view(uint64_t address) const {
  for (size_t i = 0; i < chunks_.size(); ++i)
    if (address - chunks_[i].c.view < kChunkBytes) return static_cast<int>(i);
  return -1;
}

// Makes `at` the start of an entry if an entry runs across it.
void PinArena::split(Counts& m, uint64_t at) {
  auto it = m.upper_bound(at);
  if (it == m.begin()) return;
  --it;
  if (it->first < at && it->second.end > at) {
    Count tail = it->second;
    it->second.end = at;
    m.emplace(at, tail);
  }
}

// Joins neighbours in [from, to] (and the ones touching it) that are adjacent with equal counts.
void PinArena::merge_around(Counts& m, uint64_t from, uint64_t to) {
  auto it = m.lower_bound(from);
  if (it != m.begin()) --it;
  while (it != m.end() && it->first <= to) {
    auto next = std::next(it);
    if (next == m.end()) break;
    if (it->second.end == next->first && it->second.uses == next->second.uses &&
        it->second.delta == next->second.delta) {
      it->second.end = next->second.end;
      m.erase(next);
      continue;
    }
    it = next;
  }
}

void PinArena::use(uint32_t c, uint64_t offset, uint64_t end, uint64_t delta) {
  Counts& m = chunks_[c].counts;
  split(m, offset);
  split(m, end);
  uint64_t at = offset;
  auto it = m.lower_bound(offset);
  while (at < end) {
    if (it != m.end() && it->first == at) {
      it->second.uses += 1;
      at = it->second.end;
      ++it;
      continue;
    }
    const uint64_t gap_end = it != m.end() && it->first < end ? it->first : end;
    m.emplace_hint(it, at, Count{gap_end, 1, delta});
    at = gap_end;
  }
  merge_around(m, offset, end);
}

bool PinArena::in_use(uint32_t c, uint64_t offset, uint64_t end) const {
  if (c >= chunks_.size()) return false;
  const Counts& m = chunks_[c].counts;
  auto it = m.upper_bound(offset);
  if (it == m.begin()) return false;
  --it;
  uint64_t at = offset;
  while (at < end) {
    if (it == m.end() || it->first > at || it->second.end <= at) return false;
    at = it->second.end;
    ++it;
  }
  return true;
}

void PinArena::release(uint32_t c, uint64_t offset, uint64_t end, std::vector<Idle>* idle) {
  Counts& m = chunks_[c].counts;
  split(m, offset);
  split(m, end);
  for (auto it = m.lower_bound(offset); it != m.end() && it->first < end;) {
    if (--it->second.uses == 0) {
      idle->push_back(Idle{c, it->first, it->second.end, it->second.delta});
      it = m.erase(it);
    } else {
      ++it;
    }
  }
  merge_around(m, offset, end);
}

uint64_t PinArena::bytes_in_use() const {
  uint64_t n = 0;
  for (const Entry& e : chunks_)
    for (const auto& [off, count] : e.counts) n += count.end - off;
  return n;
}

void PinArena::reset() { chunks_.clear(); }

}  // namespace softhca::runtime
