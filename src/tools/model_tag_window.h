// The WRs behind the tags the timing model's listener hears (sim::ChainListener): a sliding window
// over tag serial numbers, so a run's bookkeeping is bounded by the completions in flight, not by
// the run's length. A tag is the low 32 bits of its serial (wrap-safe); serials start at 1.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <stdexcept>

namespace softhca::tools {

template <class Info>
class TagWindow {
 public:
  // The tag the next issue() returns. A chain whose tagged steps carry relative tags 1..k is
  // submitted with tag base next() - 1 after (or before) issuing its k tags in order.
  [[nodiscard]] uint32_t next() const { return static_cast<uint32_t>(next_); }
  // Keeps `info` for the next tag; returns that tag.
  uint32_t issue(const Info& info) {
    entries_.push_back(Entry{info, false});
    peak_ = std::max(peak_, entries_.size());
    return static_cast<uint32_t>(next_++);
  }
  // The entry of a tag issued and not yet heard; it is then dropped (entries heard at the front of
  // the window go at once, later ones when every earlier one has been heard).
  Info hear(uint32_t tag) {
    const uint32_t offset = tag - static_cast<uint32_t>(base_);
    if (offset >= entries_.size() || entries_[offset].heard) {
      throw std::logic_error("model: a completion tag heard twice, or never issued");
    }
    entries_[offset].heard = true;
    const Info out = entries_[offset].info;
    while (!entries_.empty() && entries_.front().heard) {
      entries_.pop_front();
      ++base_;
    }
    return out;
  }
  // Entries kept now (issued, or heard behind an earlier one not yet heard), and at most so far.
  [[nodiscard]] size_t size() const { return entries_.size(); }
  [[nodiscard]] size_t peak() const { return peak_; }

 private:
  struct Entry {
    Info info;
    bool heard;
  };
  std::deque<Entry> entries_;
  uint64_t base_ = 1;  // serial of entries_.front()
  uint64_t next_ = 1;  // serial of the next issue()
  size_t peak_ = 0;
};

}  // namespace softhca::tools
