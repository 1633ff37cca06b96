// A FIFO of trivially copyable values in one growable power-of-two ring: what the timing model's
// pools keep their returns and waiting takers in. std::deque costs a block lookup per access and
// an allocation per block; this costs a mask, and allocates only when it grows (rarely: a pool's
// queue stays as long as its budget). Leaves out: non-trivial types, shrinking.
#pragma once
#include <cstddef>
#include <type_traits>
#include <vector>

namespace softhca::sim {

template <class T>
class RingQueue {
  static_assert(std::is_trivially_copyable_v<T>, "RingQueue moves its values bytewise");

 public:
  [[nodiscard]] bool empty() const { return size_ == 0; }
  [[nodiscard]] size_t size() const { return size_; }
  // The i-th value from the front (0 = front).
  T& operator[](size_t i) { return buf_[(head_ + i) & mask_]; }
  const T& operator[](size_t i) const { return buf_[(head_ + i) & mask_]; }
  T& front() { return buf_[head_]; }
  const T& front() const { return buf_[head_]; }
  T& back() { return (*this)[size_ - 1]; }
  const T& back() const { return (*this)[size_ - 1]; }

  void push_back(const T& v) {
    if (size_ == capacity_) grow();
    buf_[(head_ + size_) & mask_] = v;
    ++size_;
  }
  void pop_front() {
    head_ = (head_ + 1) & mask_;
    --size_;
  }
  // Inserts v before the i-th value (i <= size()), moving the values after it back by one.
  void insert(size_t i, const T& v) {
    push_back(v);
    for (size_t j = size_ - 1; j > i; --j) (*this)[j] = (*this)[j - 1];
    (*this)[i] = v;
  }

 private:
  void grow() {
    std::vector<T> bigger(buf_.empty() ? 8 : buf_.size() * 2);
    for (size_t i = 0; i < size_; ++i) bigger[i] = (*this)[i];
    buf_.swap(bigger);
    head_ = 0;
    capacity_ = buf_.size();
    mask_ = capacity_ - 1;
  }

  std::vector<T> buf_;
  size_t head_ = 0;
  size_t size_ = 0;
  size_t capacity_ = 0;  // buf_.size(), kept: push_back compares with it
  size_t mask_ = 0;
};

}  // namespace softhca::sim
