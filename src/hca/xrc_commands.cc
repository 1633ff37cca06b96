// XRC on the control path (IBA 11.2.4; ibv_open_xrcd(3), ibv_open_qp(3)): opening and closing
// domains shared by file between the processes of a host, the checks that create XRC SRQs and
// TGT QPs, handles on TGT QPs, and what a dead process's opens and handles leave behind.
// Under the device lock, as every command.
#include <cerrno>

#include "hca/device.h"

namespace softhca::hca {

using namespace hwif;

int Device::cmd_open_xrcd(const OpenXrcdIn& in, OpenXrcdOut& out) {
  if (!in.anonymous) {
    uint32_t found = 0;
    xrcds_.for_each([&](uint32_t n, const XrcDomain& d) {
      if (!d.anonymous && d.file_dev == in.file_dev && d.file_ino == in.file_ino) found = n;
    });
    if (found != 0) {
      // As the kernel's ib_uverbs_open_xrcd: O_EXCL refuses a domain that exists for the file.
      if (in.exclusive) return EINVAL;
      if (!xrcds_.find(found)->opens.add(owner_)) return ENOMEM;
      out.xrcdn = found;
      return 0;
    }
    if (!in.create) return EINVAL;  // the kernel's answer too
  }
  XrcDomain* d = nullptr;
  const uint32_t n = xrcds_.insert(owner_, &d);
  if (d == nullptr) return ENOMEM;
  d->anonymous = in.anonymous;
  d->file_dev = in.file_dev;
  d->file_ino = in.file_ino;
  d->opens.add(owner_);
  out.xrcdn = n;
  return 0;
}

int Device::cmd_close_xrcd(const CloseXrcdIn& in, NoOut&) {
  XrcDomain* d = xrcds_.find(in.xrcdn);
  if (d == nullptr || d->opens.held_by(owner_) == 0) return EINVAL;
  if (d->opens.total() == 1 && d->users != 0) return EBUSY;
  d->opens.drop(owner_);
  if (d->opens.total() == 0) xrcds_.erase(in.xrcdn);
  return 0;
}

int Device::check_xrc_srq(const CreateSrqIn& in) const {
  const XrcDomain* d = xrcds_.find(in.xrcdn);
  if (d == nullptr || d->opens.held_by(owner_) == 0) return EINVAL;
  if (cqs_.find(in.cqn) == nullptr) return EINVAL;
  return 0;
}

int Device::check_xrc_qp(const CreateQpIn& in) const {
  if (in.type == QpType::kXrcTgt) {
    const XrcDomain* d = xrcds_.find(in.xrcdn);
    return d != nullptr && d->opens.held_by(owner_) != 0 ? 0 : EINVAL;
  }
  // INI: a PD and a send CQ, no receive side.
  if (pds_.find(in.pdn) == nullptr || cqs_.find(in.send_cqn) == nullptr) return EINVAL;
  return 0;
}

int Device::cmd_open_qp(const OpenQpIn& in, NoOut&) {
  const XrcDomain* d = xrcds_.find(in.xrcdn);
  if (d == nullptr || d->opens.held_by(owner_) == 0) return EINVAL;
  QueuePair* qp = qps_.find(in.qpn);
  if (qp == nullptr || qp->type != QpType::kXrcTgt || qp->xrcdn != in.xrcdn) return EINVAL;
  return qp->handles.add(owner_) ? 0 : ENOMEM;
}

void Device::release_xrcd(uint32_t xrcdn) {
  XrcDomain* d = xrcds_.find(xrcdn);
  if (d == nullptr) return;
  if (d->users > 0) --d->users;
  // The last SRQ or TGT QP of a domain nobody holds open any more (its openers closed or died
  // while another process's handle kept a TGT QP): the domain goes with it.
  if (d->users == 0 && d->opens.total() == 0) xrcds_.erase(xrcdn);
}

SharedReceiveQueue* Device::xrc_srq_of(const QueuePair& qp) const {
  SharedReceiveQueue* srq = srqs_.find(qp.resp.xrc_srqn);
  if (srq == nullptr || srq->xrcdn == kNoXrcd || srq->xrcdn != qp.xrcdn) return nullptr;
  return srq;
}

// A TGT QP has no memory of its owner's (no rings), so it outlives a dead creator while other
// processes hold handles on it; the others' objects went with them already.
void Device::reclaim_xrc(uint32_t owner) {
  qps_.for_each([&](uint32_t qpn, QueuePair& qp) {
    if (qp.type != QpType::kXrcTgt || !qp.handles.drop_all(owner)) return;
    if (qp.handles.total() == 0) destroy_qp(qpn);
  });
}

}  // namespace softhca::hca
