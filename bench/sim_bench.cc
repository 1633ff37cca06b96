// Scheduler throughput: events per second (items) for the timing model's budget (issue 4 asks
// for at least 20 M events/s on one core).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "sim/random_stream.h"
#include "sim/scheduler.h"
#include "sim/timer.h"

namespace softhca::sim {
namespace {

// range(0) events pending at all times; each event schedules its successor at a random delay.
void BM_SchedulerSteadyState(benchmark::State& state) {
  Scheduler s;
  RandomStream rng = RandomStream::for_component(1, "bench");
  uint64_t fired = 0;
  struct Chain {
    Scheduler* s;
    RandomStream* rng;
    uint64_t* fired;
    void operator()() const {
      ++*fired;
      s->schedule_after(Picoseconds(static_cast<int64_t>(rng->below(100000))), *this);
    }
  };
  for (int64_t i = 0; i < state.range(0); ++i) {
    s.schedule_after(Picoseconds(static_cast<int64_t>(rng.below(100000))), Chain{&s, &rng, &fired});
  }
  for (auto _ : state) s.run_one();
  state.SetItemsProcessed(static_cast<int64_t>(fired));
}
BENCHMARK(BM_SchedulerSteadyState)->Arg(16)->Arg(1024)->Arg(65536);

// A retransmission timer re-armed per ACK: one cancel and one schedule per iteration.
void BM_TimerRearm(benchmark::State& state) {
  Scheduler s;
  Timer t(s, [] {});
  for (auto _ : state) t.arm_after(1_us);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_TimerRearm);

void BM_RandomStreamNext(benchmark::State& state) {
  RandomStream r(42);
  for (auto _ : state) benchmark::DoNotOptimize(r.next());
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RandomStreamNext);

}  // namespace
}  // namespace softhca::sim
