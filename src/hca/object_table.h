// A table of device objects addressed by number (PDN, CQN, QPN, ...): slots reused through a free
// list, numbers = first_number + slot. Control path only (allocates); lookups are O(1).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

namespace softhca::hca {

template <class T>
class ObjectTable {
 public:
  ObjectTable(uint32_t first_number, uint32_t capacity) : first_(first_number), capacity_(capacity) {}

  // Returns the new object's number, or 0 with *out = nullptr when the table is full.
  uint32_t insert(std::unique_ptr<T> obj, T** out = nullptr) {
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      if (slots_.size() >= capacity_) {
        if (out) *out = nullptr;
        return 0;
      }
      slot = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
    }
    if (out) *out = obj.get();
    slots_[slot] = std::move(obj);
    ++live_;
    return first_ + slot;
  }

  [[nodiscard]] T* find(uint32_t number) const {
    if (number < first_) return nullptr;
    uint32_t slot = number - first_;
    return slot < slots_.size() ? slots_[slot].get() : nullptr;
  }

  bool erase(uint32_t number) {
    if (!find(number)) return false;
    slots_[number - first_].reset();
    free_.push_back(number - first_);
    --live_;
    return true;
  }

  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i]) f(first_ + static_cast<uint32_t>(i), *slots_[i]);
  }

  [[nodiscard]] uint32_t live() const { return live_; }

 private:
  uint32_t first_;
  uint32_t capacity_;
  uint32_t live_ = 0;
  std::vector<std::unique_ptr<T>> slots_;
  std::vector<uint32_t> free_;
};

}  // namespace softhca::hca
