#include "runtime/coherent_pool.h"

#include <bit>

namespace softhca::runtime {

unsigned CoherentPool::small_class(uint64_t bytes) {
  const uint64_t b = std::bit_ceil(bytes < kMinBlockBytes ? kMinBlockBytes : bytes);
  return static_cast<unsigned>(std::countr_zero(b) - std::countr_zero(kMinBlockBytes));
}

uint64_t CoherentPool::rounded(uint64_t bytes) const {
  if (bytes <= (kMinBlockBytes << (kSmallClasses - 1)) && (kMinBlockBytes << (kSmallClasses - 1)) < page_)
    return kMinBlockBytes << small_class(bytes);
  if (bytes > UINT64_MAX - page_) return 0;
  const uint64_t pages = bytes == 0 ? 1 : (bytes + page_ - 1) / page_;
  return pages * page_;
}

uint64_t CoherentPool::new_chunk_bytes(uint64_t bytes) const {
  const uint64_t r = rounded(bytes);
  return r > kOwnChunkAbove ? r : kChunkBytes;
}

CoherentPool::Place CoherentPool::allocate(uint64_t bytes) {
  const uint64_t r = rounded(bytes);
  if (r == 0 || r > kOwnChunkAbove) return {};
  uint64_t address = 0;
  if (r < page_) {
    std::vector<uint64_t>& free = free_small_[small_class(r)];
    if (free.empty()) {
      const uint64_t page = take_run(page_);  // a page carved into blocks of this class
      if (page == 0) return {};
      for (uint64_t at = page + page_; at > page;) {
        at -= r;
        free.push_back(at);
      }
    }
    address = free.back();
    free.pop_back();
  } else {
    address = take_run(r);
    if (address == 0) return {};
  }
  in_use_ += r;
  const auto [base, size] = chunk_of(address);
  return Place{base, address - base};
}

void CoherentPool::add_chunk(uint64_t base, uint64_t bytes, bool own, int fd) {
  chunks_[base] = Chunk{bytes, own, fd};
  if (own) {
    in_use_ += bytes;
    return;
  }
  give_run(base, bytes);
}

bool CoherentPool::release(uint64_t address, uint64_t bytes, Release* out) {
  *out = Release{};
  const auto [base, size] = chunk_of(address);
  const uint64_t r = rounded(bytes);
  if (base == 0 || r == 0) return false;
  const Chunk& c = chunks_.at(base);
  if (c.own) {
    if (address != base) return false;
    out->drop_chunk = base;
    out->chunk_bytes = c.bytes;
    in_use_ -= c.bytes;
    chunks_.erase(base);
    return true;
  }
  in_use_ -= r;
  if (r < page_) {
    free_small_[small_class(r)].push_back(address);
    out->zero_bytes = r;
    return true;
  }
  give_run(address, r);
  out->punch_bytes = r;
  return true;
}

std::pair<uint64_t, uint64_t> CoherentPool::chunk_of(uint64_t address) const {
  auto it = chunks_.upper_bound(address);
  if (it == chunks_.begin()) return {0, 0};
  --it;
  if (address - it->first >= it->second.bytes) return {0, 0};
  return {it->first, it->second.bytes};
}

bool CoherentPool::has_own_chunk(uint64_t address) const {
  auto it = chunks_.find(address);
  return it != chunks_.end() && it->second.own;
}

int CoherentPool::fd_of(uint64_t base) const {
  auto it = chunks_.find(base);
  return it == chunks_.end() ? -1 : it->second.fd;
}

void CoherentPool::reset() {
  chunks_.clear();
  free_runs_.clear();
  by_size_.clear();
  for (std::vector<uint64_t>& v : free_small_) v.clear();
  in_use_ = 0;
}

uint64_t CoherentPool::take_run(uint64_t bytes) {
  auto it = by_size_.lower_bound({bytes, 0});
  if (it == by_size_.end()) return 0;
  const auto [run_bytes, address] = *it;
  by_size_.erase(it);
  free_runs_.erase(address);
  if (run_bytes > bytes) {
    free_runs_[address + bytes] = run_bytes - bytes;
    by_size_.insert({run_bytes - bytes, address + bytes});
  }
  return address;
}

// Coalesces with the free runs on either side when they lie in the same chunk.
void CoherentPool::give_run(uint64_t address, uint64_t bytes) {
  const uint64_t base = chunk_of(address).first;
  auto next = free_runs_.lower_bound(address);
  if (next != free_runs_.end() && next->first == address + bytes && chunk_of(next->first).first == base) {
    bytes += next->second;
    by_size_.erase({next->second, next->first});
    next = free_runs_.erase(next);
  }
  if (next != free_runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address && chunk_of(prev->first).first == base) {
      by_size_.erase({prev->second, prev->first});
      address = prev->first;
      bytes += prev->second;
      free_runs_.erase(prev);
    }
  }
  free_runs_[address] = bytes;
  by_size_.insert({bytes, address});
}

}  // namespace softhca::runtime
