// What creating and destroying verbs objects costs with many alive (issue 15, row 11): for each
// count of objects already alive, the mean time of one more ibv_create_qp + ibv_destroy_qp (small
// queues), and of one more ibv_reg_mr + ibv_dereg_mr of a page of its own (a page-aligned malloc'd
// buffer each: distinct pages with malloc's headers between them). Through the public verbs API only, so the
// same program measures any libibverbs.so.1 (LD_LIBRARY_PATH): a count the library cannot reach is
// reported as where it stopped. Prints a table, and JSON with --json. Options: --counts
// N,N,... (default 0,1024,4096,16384,65000), --cycles K (timed cycles per count, default 256).
#include <infiniband/verbs.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPage = 4096;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

struct Row {
  std::string kind;
  size_t alive = 0;     // objects alive while the cycles ran
  size_t reached = 0;   // < alive: the library refused the next one (errno)
  int error = 0;
  double create_us = 0;
  double destroy_us = 0;
};

ibv_qp* small_qp(ibv_pd* pd, ibv_cq* cq) {
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 1;
  a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  return ibv_create_qp(pd, &a);
}

Row bench_qps(ibv_pd* pd, ibv_cq* cq, size_t alive, size_t cycles) {
  Row r;
  r.kind = "qp";
  r.alive = alive;
  std::vector<ibv_qp*> held;
  held.reserve(alive);
  while (held.size() < alive) {
    ibv_qp* qp = small_qp(pd, cq);
    if (qp == nullptr) {
      r.error = errno;
      break;
    }
    held.push_back(qp);
  }
  r.reached = held.size();
  if (r.reached == alive) {
    Clock::duration create{}, destroy{};
    for (size_t i = 0; i < cycles; ++i) {
      const auto t0 = Clock::now();
      ibv_qp* qp = small_qp(pd, cq);
      const auto t1 = Clock::now();
      if (qp == nullptr) {
        r.error = errno;
        break;
      }
      ibv_destroy_qp(qp);
      destroy += Clock::now() - t1;
      create += t1 - t0;
    }
    r.create_us = micros(create) / static_cast<double>(cycles);
    r.destroy_us = micros(destroy) / static_cast<double>(cycles);
  }
  for (ibv_qp* qp : held) ibv_destroy_qp(qp);
  return r;
}

Row bench_mrs(ibv_pd* pd, size_t alive, size_t cycles) {
  Row r;
  r.kind = "mr";
  r.alive = alive;
  const size_t pages = alive + cycles;
  std::vector<uint8_t*> bufs(pages);
  for (uint8_t*& b : bufs) {
    b = static_cast<uint8_t*>(std::aligned_alloc(kPage, kPage));
    if (b == nullptr) {
      r.error = ENOMEM;
      return r;
    }
    b[0] = 1;
  }
  auto page = [&](size_t i) { return bufs[i]; };
  std::vector<ibv_mr*> held;
  held.reserve(alive);
  constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  while (held.size() < alive) {
    ibv_mr* mr = ibv_reg_mr(pd, page(held.size()), kPage, kAccess);
    if (mr == nullptr) {
      r.error = errno;
      break;
    }
    held.push_back(mr);
  }
  r.reached = held.size();
  if (r.reached == alive) {
    Clock::duration create{}, destroy{};
    for (size_t i = 0; i < cycles; ++i) {
      const auto t0 = Clock::now();
      ibv_mr* mr = ibv_reg_mr(pd, page(alive + i), kPage, kAccess);
      const auto t1 = Clock::now();
      if (mr == nullptr) {
        r.error = errno;
        break;
      }
      ibv_dereg_mr(mr);
      destroy += Clock::now() - t1;
      create += t1 - t0;
    }
    r.create_us = micros(create) / static_cast<double>(cycles);
    r.destroy_us = micros(destroy) / static_cast<double>(cycles);
  }
  for (ibv_mr* mr : held) ibv_dereg_mr(mr);
  for (uint8_t* b : bufs) std::free(b);
  return r;
}

std::vector<size_t> parse_counts(const char* s) {
  std::vector<size_t> out;
  for (const char* p = s; *p != '\0';) {
    char* end = nullptr;
    out.push_back(std::strtoull(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *p != '\0') break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> counts{0, 1024, 4096, 16384, 65000};
  size_t cycles = 256;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--counts" && i + 1 < argc) {
      counts = parse_counts(argv[++i]);
    } else if (a == "--cycles" && i + 1 < argc) {
      cycles = std::max<size_t>(1, std::strtoull(argv[++i], nullptr, 10));
    } else {
      std::fprintf(stderr, "usage: %s [--counts N,N,...] [--cycles K] [--json]\n", argv[0]);
      return 2;
    }
  }
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) {
    std::fprintf(stderr, "no RDMA device\n");
    return 1;
  }
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_pd* pd = ctx != nullptr ? ibv_alloc_pd(ctx) : nullptr;
  ibv_cq* cq = pd != nullptr ? ibv_create_cq(ctx, 16, nullptr, nullptr, 0) : nullptr;
  if (cq == nullptr) {
    std::fprintf(stderr, "cannot open %s: %s\n", ibv_get_device_name(list[0]), std::strerror(errno));
    return 1;
  }
  std::vector<Row> rows;
  for (size_t c : counts) rows.push_back(bench_qps(pd, cq, c, cycles));
  for (size_t c : counts) rows.push_back(bench_mrs(pd, c, cycles));
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  ibv_free_device_list(list);

  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json j{{"kind", r.kind}, {"alive", r.alive}, {"reached", r.reached}};
      if (r.reached == r.alive) {
        j["create_us"] = r.create_us;
        j["destroy_us"] = r.destroy_us;
      } else {
        j["errno"] = r.error;
      }
      out.push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("| object | alive | create [us] | destroy [us] |\n|---|---|---|---|\n");
  for (const Row& r : rows) {
    if (r.reached == r.alive)
      std::printf("| %s | %zu | %.1f | %.1f |\n", r.kind.c_str(), r.alive, r.create_us, r.destroy_us);
    else
      std::printf("| %s | %zu | stopped at %zu (%s) | |\n", r.kind.c_str(), r.alive, r.reached, std::strerror(r.error));
  }
  return 0;
}
