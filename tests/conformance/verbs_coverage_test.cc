// docs/verbs-coverage.md against the code: every verb of rdma-core 44's <infiniband/verbs.h> has a
// row, and each row's "supported" column is what the library really does. Three sources are read:
//   - the dynamic symbol table of the built libibverbs.so.1 (an ELF reader below): every exported
//     verb has an `export` row and every `export` row is exported;
//   - src/verbs/unsupported.cc: the exports defined there (they answer EOPNOTSUPP) are exactly the
//     `export` rows marked "no";
//   - an opened device: for rows reached through an op (`ctx.` a verbs_context member, `ops.` an
//     ibv_context_ops member, `qp_ex.` a member of an RC QP's ibv_qp_ex, `cq_ex.` a member of an
//     extended CQ with every wc_flags field the device gives) the op is set exactly
//     when the row says "yes" or "partial".
// The static inline functions of the installed verbs.h each need a row too.
#include <elf.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "verbs_pair.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Row {
  std::string via;     // "export", "export NAME", "inline", "ctx.M", "ops.M", "qp_ex.M"
  std::string status;  // "yes", "partial", "no"
};

std::map<std::string, Row> read_table() {
  const std::string doc = read_file(SOFTHCA_SOURCE_DIR "/docs/verbs-coverage.md");
  std::map<std::string, Row> rows;
  static const std::regex row(R"(^\| `(\w+)` \| `([\w. ]+)` \| (yes|partial|no) \|)");
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    EXPECT_TRUE(rows.emplace(m[1], Row{m[2], m[3]}).second) << "two rows for " << m[1];
  }
  return rows;
}

// The defined, global function symbols of a shared object whose version is a public
// IBVERBS_1.x node or IBVERBS_PRIVATE_* (the versions libibverbs.map gives).
std::set<std::string> exported_verbs(const std::string& path) {
  const std::string f = read_file(path);
  std::set<std::string> out;
  if (f.size() < sizeof(Elf64_Ehdr) || std::memcmp(f.data(), ELFMAG, SELFMAG) != 0) return out;
  Elf64_Ehdr eh;
  std::memcpy(&eh, f.data(), sizeof eh);
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  std::memcpy(sh.data(), f.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  const Elf64_Shdr* dynsym = nullptr;
  const Elf64_Shdr* versym = nullptr;
  const Elf64_Shdr* verdef = nullptr;
  for (const Elf64_Shdr& s : sh) {
    if (s.sh_type == SHT_DYNSYM) dynsym = &s;
    if (s.sh_type == SHT_GNU_versym) versym = &s;
    if (s.sh_type == SHT_GNU_verdef) verdef = &s;
  }
  if (dynsym == nullptr || versym == nullptr || verdef == nullptr) return out;
  const char* strtab = f.data() + sh[dynsym->sh_link].sh_offset;
  std::map<uint16_t, std::string> version;
  for (size_t off = verdef->sh_offset;;) {
    Elf64_Verdef vd;
    std::memcpy(&vd, f.data() + off, sizeof vd);
    Elf64_Verdaux aux;
    std::memcpy(&aux, f.data() + off + vd.vd_aux, sizeof aux);
    version[vd.vd_ndx] = strtab + aux.vda_name;
    if (vd.vd_next == 0) break;
    off += vd.vd_next;
  }
  const size_t n = dynsym->sh_size / sizeof(Elf64_Sym);
  for (size_t i = 0; i < n; ++i) {
    Elf64_Sym sym;
    std::memcpy(&sym, f.data() + dynsym->sh_offset + i * sizeof sym, sizeof sym);
    uint16_t ver = 0;
    std::memcpy(&ver, f.data() + versym->sh_offset + i * sizeof ver, sizeof ver);
    if (sym.st_shndx == SHN_UNDEF || ELF64_ST_TYPE(sym.st_info) != STT_FUNC ||
        ELF64_ST_BIND(sym.st_info) != STB_GLOBAL) {
      continue;
    }
    const std::string v = version[static_cast<uint16_t>(ver & 0x7fff)];
    if (v.rfind("IBVERBS_", 0) == 0) out.insert(strtab + sym.st_name);
  }
  return out;
}

// Names of the functions src/verbs/unsupported.cc defines at file scope.
std::set<std::string> unsupported_exports() {
  const std::string src = read_file(SOFTHCA_SOURCE_DIR "/src/verbs/unsupported.cc");
  static const std::regex def(R"(^[\w* ]+?\b(_?ibv_\w+)\()", std::regex::multiline);
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(src.begin(), src.end(), def); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

// The static inline functions (named ibv_*) that the installed <infiniband/verbs.h> defines.
std::set<std::string> inline_verbs() {
  const std::string h = read_file(SOFTHCA_VERBS_HEADER);
  static const std::regex def(R"(static\s+inline\s+[^;{(]*?\b(ibv_\w+)\s*\([^)]*\)\s*\{)");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(h.begin(), h.end(), def); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

bool supported(const Row& r) { return r.status != "no"; }

TEST(VerbsCoverage, EveryExportedVerbHasARowAndEveryExportRowIsExported) {
  const auto rows = read_table();
  const auto exports = exported_verbs(SOFTHCA_VERBS_SO);
  ASSERT_GT(exports.size(), 60U) << "could not read the dynamic symbols of " SOFTHCA_VERBS_SO;
  for (const std::string& e : exports) {
    auto it = rows.find(e);
    ASSERT_NE(it, rows.end()) << e << " is exported but has no row in docs/verbs-coverage.md";
    EXPECT_EQ(it->second.via, "export") << e;
  }
  for (const auto& [name, row] : rows) {
    if (row.via == "export") {
      EXPECT_TRUE(exports.count(name)) << name << " has an export row but is not exported";
    }
  }
}

TEST(VerbsCoverage, ExportsMarkedNoAreExactlyTheOnesThatAnswerEopnotsupp) {
  const auto rows = read_table();
  const auto unsupported = unsupported_exports();
  ASSERT_FALSE(unsupported.empty());
  for (const auto& [name, row] : rows) {
    if (row.via != "export") continue;
    EXPECT_EQ(!supported(row), unsupported.count(name) == 1)
        << name << ": the table says " << row.status << ", src/verbs/unsupported.cc "
        << (unsupported.count(name) ? "defines it" : "does not define it");
  }
  for (const std::string& u : unsupported) EXPECT_TRUE(rows.count(u)) << u << " has no row";
}

TEST(VerbsCoverage, EveryInlineVerbOfTheHeaderHasARowAndWrappersFollowTheirExport) {
  const auto rows = read_table();
  const auto inl = inline_verbs();
  ASSERT_GT(inl.size(), 50U) << "could not read " SOFTHCA_VERBS_HEADER;
  for (const std::string& name : inl) EXPECT_TRUE(rows.count(name)) << name << " (verbs.h) has no row";
  for (const auto& [name, row] : rows) {
    if (row.via.rfind("export ", 0) != 0) continue;
    auto target = rows.find(row.via.substr(7));
    ASSERT_NE(target, rows.end()) << name << " wraps " << row.via.substr(7) << ", which has no row";
    EXPECT_EQ(row.status, target->second.status) << name;
  }
}

// Each op the inline wrappers reach, by name, read from a live context and QP.
class VerbsCoverageOps : public softhca::conformance::VerbsPair {};

TEST_F(VerbsCoverageOps, RowsReachedThroughAnOpSayYesExactlyWhenTheOpIsSet) {
  open(softhca::conformance::Topology::kLoopback);
  auto* vctx = reinterpret_cast<verbs_context*>(reinterpret_cast<char*>(a_.ctx) -
                                                offsetof(verbs_context, context));
  const ibv_context_ops& ops = a_.ctx->ops;
  ibv_qp_init_attr_ex attr{};
  attr.qp_type = IBV_QPT_RC;
  attr.send_cq = a_.cq;
  attr.recv_cq = a_.cq;
  attr.cap.max_send_wr = 4;
  attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.pd = a_.pd;
  attr.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  attr.send_ops_flags = IBV_QP_EX_WITH_SEND;
  ibv_qp* qp = ibv_create_qp_ex(a_.ctx, &attr);
  ASSERT_NE(qp, nullptr);
  const ibv_qp_ex* qpx = ibv_qp_to_qp_ex(qp);
  ASSERT_NE(qpx, nullptr);
  // An extended CQ with every field the device can give (create_cq_ex refuses the others).
  ibv_cq_init_attr_ex cq_attr{};
  cq_attr.cqe = 4;
  cq_attr.wc_flags = uint64_t{IBV_WC_STANDARD_FLAGS} | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  ibv_cq_ex* cqx = vctx->create_cq_ex != nullptr ? ibv_create_cq_ex(a_.ctx, &cq_attr) : nullptr;
  const ibv_cq_ex no_cq_ex{};
  const ibv_cq_ex& cq_ex = cqx != nullptr ? *cqx : no_cq_ex;

#define SOFTHCA_OP(prefix, obj, member) {#prefix "." #member, (obj).member != nullptr},
  const std::map<std::string, bool> set = {
      SOFTHCA_OP(ctx, *vctx, query_port) SOFTHCA_OP(ctx, *vctx, query_device_ex)
      SOFTHCA_OP(ctx, *vctx, create_qp_ex) SOFTHCA_OP(ctx, *vctx, create_srq_ex)
      SOFTHCA_OP(ctx, *vctx, advise_mr) SOFTHCA_OP(ctx, *vctx, alloc_null_mr)
      SOFTHCA_OP(ctx, *vctx, read_counters) SOFTHCA_OP(ctx, *vctx, attach_counters_point_flow)
      SOFTHCA_OP(ctx, *vctx, create_counters) SOFTHCA_OP(ctx, *vctx, destroy_counters)
      SOFTHCA_OP(ctx, *vctx, reg_dm_mr) SOFTHCA_OP(ctx, *vctx, alloc_dm)
      SOFTHCA_OP(ctx, *vctx, free_dm) SOFTHCA_OP(ctx, *vctx, modify_flow_action_esp)
      SOFTHCA_OP(ctx, *vctx, destroy_flow_action) SOFTHCA_OP(ctx, *vctx, create_flow_action_esp)
      SOFTHCA_OP(ctx, *vctx, modify_qp_rate_limit) SOFTHCA_OP(ctx, *vctx, alloc_parent_domain)
      SOFTHCA_OP(ctx, *vctx, dealloc_td) SOFTHCA_OP(ctx, *vctx, alloc_td)
      SOFTHCA_OP(ctx, *vctx, modify_cq) SOFTHCA_OP(ctx, *vctx, post_srq_ops)
      SOFTHCA_OP(ctx, *vctx, destroy_rwq_ind_table) SOFTHCA_OP(ctx, *vctx, create_rwq_ind_table)
      SOFTHCA_OP(ctx, *vctx, destroy_wq) SOFTHCA_OP(ctx, *vctx, modify_wq)
      SOFTHCA_OP(ctx, *vctx, create_wq) SOFTHCA_OP(ctx, *vctx, query_rt_values)
      SOFTHCA_OP(ctx, *vctx, create_cq_ex) SOFTHCA_OP(ctx, *vctx, ibv_destroy_flow)
      SOFTHCA_OP(ctx, *vctx, ibv_create_flow) SOFTHCA_OP(ctx, *vctx, open_qp)
      SOFTHCA_OP(ctx, *vctx, get_srq_num) SOFTHCA_OP(ctx, *vctx, open_xrcd)
      SOFTHCA_OP(ctx, *vctx, close_xrcd)
      SOFTHCA_OP(ops, ops, alloc_mw) SOFTHCA_OP(ops, ops, poll_cq)
      SOFTHCA_OP(ops, ops, req_notify_cq) SOFTHCA_OP(ops, ops, post_send)
      SOFTHCA_OP(ops, ops, post_recv) SOFTHCA_OP(ops, ops, post_srq_recv)
      SOFTHCA_OP(qp_ex, *qpx, wr_start) SOFTHCA_OP(qp_ex, *qpx, wr_complete)
      SOFTHCA_OP(qp_ex, *qpx, wr_abort) SOFTHCA_OP(qp_ex, *qpx, wr_send)
      SOFTHCA_OP(qp_ex, *qpx, wr_send_imm) SOFTHCA_OP(qp_ex, *qpx, wr_send_inv)
      SOFTHCA_OP(qp_ex, *qpx, wr_send_tso) SOFTHCA_OP(qp_ex, *qpx, wr_rdma_write)
      SOFTHCA_OP(qp_ex, *qpx, wr_rdma_write_imm) SOFTHCA_OP(qp_ex, *qpx, wr_rdma_read)
      SOFTHCA_OP(qp_ex, *qpx, wr_atomic_cmp_swp) SOFTHCA_OP(qp_ex, *qpx, wr_atomic_fetch_add)
      SOFTHCA_OP(qp_ex, *qpx, wr_atomic_write) SOFTHCA_OP(qp_ex, *qpx, wr_bind_mw)
      SOFTHCA_OP(qp_ex, *qpx, wr_local_inv) SOFTHCA_OP(qp_ex, *qpx, wr_set_ud_addr)
      SOFTHCA_OP(qp_ex, *qpx, wr_set_xrc_srqn) SOFTHCA_OP(qp_ex, *qpx, wr_set_sge)
      SOFTHCA_OP(qp_ex, *qpx, wr_set_sge_list) SOFTHCA_OP(qp_ex, *qpx, wr_set_inline_data)
      SOFTHCA_OP(qp_ex, *qpx, wr_set_inline_data_list)
      SOFTHCA_OP(cq_ex, cq_ex, start_poll) SOFTHCA_OP(cq_ex, cq_ex, next_poll)
      SOFTHCA_OP(cq_ex, cq_ex, end_poll) SOFTHCA_OP(cq_ex, cq_ex, read_opcode)
      SOFTHCA_OP(cq_ex, cq_ex, read_vendor_err) SOFTHCA_OP(cq_ex, cq_ex, read_byte_len)
      SOFTHCA_OP(cq_ex, cq_ex, read_imm_data) SOFTHCA_OP(cq_ex, cq_ex, read_qp_num)
      SOFTHCA_OP(cq_ex, cq_ex, read_src_qp) SOFTHCA_OP(cq_ex, cq_ex, read_wc_flags)
      SOFTHCA_OP(cq_ex, cq_ex, read_slid) SOFTHCA_OP(cq_ex, cq_ex, read_sl)
      SOFTHCA_OP(cq_ex, cq_ex, read_dlid_path_bits) SOFTHCA_OP(cq_ex, cq_ex, read_completion_ts)
      SOFTHCA_OP(cq_ex, cq_ex, read_cvlan) SOFTHCA_OP(cq_ex, cq_ex, read_flow_tag)
      SOFTHCA_OP(cq_ex, cq_ex, read_tm_info) SOFTHCA_OP(cq_ex, cq_ex, read_completion_wallclock_ns)};
#undef SOFTHCA_OP
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  if (cqx != nullptr) {
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
  }

  size_t checked = 0;
  for (const auto& [name, row] : read_table()) {
    if (row.via == "export" || row.via == "inline" || row.via.rfind("export ", 0) == 0) continue;
    auto it = set.find(row.via);
    ASSERT_NE(it, set.end()) << name << ": this test cannot read the op " << row.via << "; add it";
    EXPECT_EQ(it->second, supported(row)) << name << " (" << row.via << ") is marked " << row.status;
    ++checked;
  }
  EXPECT_GT(checked, 60U);
}

}  // namespace
