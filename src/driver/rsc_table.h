// Number -> object lookup for completions and events (QPN -> Qp for CQEs, CQN -> Cq for EQEs),
// as mlx5's two-level resource table. Numbers are 24 bits (the CQE carries a 24-bit QPN).
// Inserts and erases run on the control path, serialised by the caller (Context::table_lock);
// find() runs on the data path without a lock: slots are atomics published with release and read
// with acquire, so a found object is fully constructed. A caller of find() must keep the object
// alive by other means (poll_cq holds the CQ lock, which destroy_qp also takes before erasing).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <new>

namespace softhca::driver {

template <class T>
class RscTable {
 public:
  static constexpr uint32_t kNumberBits = 24;
  static constexpr uint32_t kLeafBits = 12;
  static constexpr uint32_t kLeafSize = 1u << kLeafBits;
  static constexpr uint32_t kTopSize = 1u << (kNumberBits - kLeafBits);

  RscTable() = default;
  RscTable(const RscTable&) = delete;
  RscTable& operator=(const RscTable&) = delete;
  ~RscTable() {
    for (auto& leaf : top_) delete[] leaf.load(std::memory_order_relaxed);
  }

  [[nodiscard]] T* find(uint32_t n) const {
    if (n >> kNumberBits) return nullptr;
    std::atomic<T*>* leaf = top_[n >> kLeafBits].load(std::memory_order_acquire);
    return leaf == nullptr ? nullptr : leaf[n & (kLeafSize - 1)].load(std::memory_order_acquire);
  }

  // Control path only (caller holds the table lock). False if n does not fit or on ENOMEM.
  [[nodiscard]] bool insert(uint32_t n, T* obj) {
    if (n >> kNumberBits) return false;
    std::atomic<T*>* leaf = top_[n >> kLeafBits].load(std::memory_order_relaxed);
    if (leaf == nullptr) {
      leaf = new (std::nothrow) std::atomic<T*>[kLeafSize]();
      if (leaf == nullptr) return false;
      top_[n >> kLeafBits].store(leaf, std::memory_order_release);
    }
    leaf[n & (kLeafSize - 1)].store(obj, std::memory_order_release);
    return true;
  }

  void erase(uint32_t n) {
    if (n >> kNumberBits) return;
    std::atomic<T*>* leaf = top_[n >> kLeafBits].load(std::memory_order_relaxed);
    if (leaf != nullptr) leaf[n & (kLeafSize - 1)].store(nullptr, std::memory_order_release);
  }

 private:
  std::array<std::atomic<std::atomic<T*>*>, kTopSize> top_{};
};

}  // namespace softhca::driver
