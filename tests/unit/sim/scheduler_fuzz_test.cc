// Random schedule / cancel / run sequences against a reference built on std::multimap, which
// keeps equal keys in insertion order: exactly the (time, sequence) order the scheduler promises.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "sim/random_stream.h"
#include "sim/scheduler.h"

namespace softhca::sim {
namespace {

struct Fired {
  int64_t at_ps;
  int id;
  bool operator==(const Fired&) const = default;
};

// Some events schedule a follow-up when they run; both sides derive it from the id alone.
// Follow-ups (ids from kChildBase) have none of their own.
constexpr int kChildBase = 1000000;
bool has_child(int id) { return id < kChildBase && id % 5 == 0; }
int64_t child_delay_ps(int id) { return (id * 7) % 13; }
int child_id(int id) { return id + kChildBase; }

class Reference {
 public:
  void schedule(int64_t at_ps, int id) { events_.emplace(at_ps, id); }
  bool cancel(int id) {
    for (auto it = events_.begin(); it != events_.end(); ++it) {
      if (it->second == id) {
        events_.erase(it);
        return true;
      }
    }
    return false;
  }
  bool run_one() {
    if (events_.empty()) return false;
    auto it = events_.begin();
    Fired f{it->first, it->second};
    events_.erase(it);
    now_ps = f.at_ps;
    log.push_back(f);
    if (has_child(f.id)) schedule(now_ps + child_delay_ps(f.id), child_id(f.id));
    return true;
  }
  void run_until(int64_t until_ps) {
    while (!events_.empty() && events_.begin()->first <= until_ps) run_one();
    now_ps = until_ps;
  }
  void step() {
    if (events_.empty()) return;
    int64_t t = events_.begin()->first;
    while (!events_.empty() && events_.begin()->first == t) run_one();
  }
  [[nodiscard]] size_t size() const { return events_.size(); }

  int64_t now_ps = 0;
  std::vector<Fired> log;

 private:
  std::multimap<int64_t, int> events_;
};

class UnderTest {
 public:
  void schedule(int64_t at_ps, int id) {
    handles_[id] = sched.schedule_at(Picoseconds(at_ps), [this, id] { fire(id); });
  }
  bool cancel(int id) {
    auto it = handles_.find(id);
    return it != handles_.end() && sched.cancel(it->second);
  }
  Scheduler sched;
  std::vector<Fired> log;

 private:
  void fire(int id) {
    log.push_back(Fired{sched.now().count(), id});
    if (has_child(id)) schedule(sched.now().count() + child_delay_ps(id), child_id(id));
  }
  std::map<int, EventHandle> handles_;
};

void run_random_sequence(uint64_t seed, int ops) {
  RandomStream rng = RandomStream::for_component(seed, "scheduler_fuzz");
  Reference ref;
  UnderTest dut;
  int next_id = 1;
  // Odd seeds build a large backlog and cancel much of it (exercises heap compaction).
  const uint64_t schedule_pct = seed % 2 == 1 ? 60 : 45;
  const uint64_t cancel_pct = seed % 2 == 1 ? 35 : 20;
  const uint64_t delay_range_ps = seed % 2 == 1 ? 400 : 20;
  for (int op = 0; op < ops; ++op) {
    if (seed % 2 == 1 && op % 500 == 499) {
      // A burst: cancel the most recent 300 ids, so cancelled entries outnumber live ones.
      for (int id = next_id - 1; id > 0 && id >= next_id - 300; --id) {
        ASSERT_EQ(ref.cancel(id), dut.cancel(id)) << "op " << op << " cancel " << id;
      }
      continue;
    }
    uint64_t kind = rng.below(100);
    if (kind < schedule_pct) {
      // Small delay ranges: plenty of equal times, so the tie order is exercised.
      int64_t at = ref.now_ps + static_cast<int64_t>(rng.below(delay_range_ps));
      ref.schedule(at, next_id);
      dut.schedule(at, next_id);
      ++next_id;
    } else if (kind < schedule_pct + cancel_pct) {
      // Any id ever used (pending, already run, already cancelled), often a recent one (likely
      // pending), or a child id.
      auto used = static_cast<uint64_t>(next_id - 1);
      int id = rng.chance(0.5) || used == 0
                   ? static_cast<int>(rng.between(1, used + 1))
                   : next_id - 1 - static_cast<int>(rng.below(used < 200 ? used : 200));
      if (rng.chance(0.2)) id = child_id(id);
      ASSERT_EQ(ref.cancel(id), dut.cancel(id)) << "op " << op << " cancel " << id;
    } else if (kind < schedule_pct + cancel_pct + (100 - schedule_pct - cancel_pct) / 2) {
      ASSERT_EQ(ref.run_one(), dut.sched.run_one()) << "op " << op;
    } else if (kind < 100 - (100 - schedule_pct - cancel_pct) / 4) {
      ref.step();
      dut.sched.step();
    } else {
      int64_t until = ref.now_ps + static_cast<int64_t>(rng.below(30));
      ref.run_until(until);
      dut.sched.run_until(Picoseconds(until));
    }
    ASSERT_EQ(ref.now_ps, dut.sched.now().count()) << "op " << op;
    ASSERT_EQ(ref.size(), dut.sched.pending()) << "op " << op;
  }
  while (ref.run_one()) {
  }
  dut.sched.run();
  ASSERT_EQ(ref.log.size(), dut.log.size());
  for (size_t i = 0; i < ref.log.size(); ++i) {
    ASSERT_EQ(ref.log[i], dut.log[i]) << "event " << i << " of seed " << seed;
  }
}

TEST(SchedulerFuzz, RandomScheduleCancelAndRunMatchAMultimapReference) {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    SCOPED_TRACE(seed);
    run_random_sequence(seed, 2000);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace softhca::sim
