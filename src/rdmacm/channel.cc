// Event channels and events (rdmacm.md §3.2, §3.3): rdma_create/destroy_event_channel,
// rdma_get_cm_event, rdma_ack_cm_event, rdma_event_str, and the queueing the rest of the library
// reports through (Library::report).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "rdmacm/library.h"

namespace softhca::rdmacm {

// A channel's fd is the reading end of a socket pair: one byte per queued event, so it is readable
// exactly while events are queued (poll, epoll, select), a blocking read waits for the next one and
// an O_NONBLOCK read fails with EAGAIN. The library drains bytes with MSG_DONTWAIT whatever the
// application set on the fd.
Channel* new_channel(bool sync) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return nullptr;
  auto* c = new (std::nothrow) Channel;
  if (c == nullptr) {
    ::close(fds[0]);
    ::close(fds[1]);
    errno = ENOMEM;
    return nullptr;
  }
  c->ch.fd = fds[0];
  c->writer = fds[1];
  c->sync = sync;
  return c;
}

void delete_channel(Channel* c) {
  if (c == nullptr) return;
  rdma_cm_event* ev = nullptr;
  // Events nobody read go with the channel.
  while (true) {
    char b;
    if (::recv(c->ch.fd, &b, 1, MSG_DONTWAIT) != 1) break;
    if (c->pop(&ev) == 0) delete reinterpret_cast<EventPriv*>(ev);
  }
  // A thread still blocked reading the channel (rping's CM thread while its main thread tears
  // down) stays blocked, as on the kernel's fd: the channel's two ends and the object stay, so it
  // never sees end-of-file, a closed or reused descriptor, nor freed memory. Otherwise all goes.
  if (c->readers.load() != 0) return;
  ::close(c->ch.fd);
  ::close(c->writer);
  delete c;
}

Channel* to_channel(rdma_event_channel* ch) { return reinterpret_cast<Channel*>(ch); }

void Channel::push(rdma_cm_event* ev) {
  {
    std::lock_guard<std::mutex> g(m_);
    q_.push_back(ev);
  }
  const char b = 1;
  while (::send(writer, &b, 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

int Channel::pop(rdma_cm_event** out) {
  std::lock_guard<std::mutex> g(m_);
  if (q_.empty()) return fail(EAGAIN);
  *out = q_.front();
  q_.pop_front();
  return 0;
}

void Channel::move_events_of(rdma_cm_id* id, Channel& to) {
  for (rdma_cm_event* ev : take_events([id](const rdma_cm_event* e) { return e->id == id; })) to.push(ev);
}

bool Channel::has_event_of(const rdma_cm_id* id) {
  std::lock_guard<std::mutex> g(m_);
  for (const rdma_cm_event* e : q_) {
    if (e->id == id) return true;
  }
  return false;
}

void Library::report(IdPriv* id, rdma_cm_event_type type, int status, const rdma_conn_param* conn,
                     const rdma_ud_param* ud, const uint8_t* data, size_t data_len, IdPriv* accounted,
                     IdPriv* listen_id) {
  auto* e = new (std::nothrow) EventPriv;
  if (e == nullptr) return;  // nothing to report it with; the id's peer retries or times out
  e->ev.id = &id->id;
  e->ev.listen_id = listen_id != nullptr ? &listen_id->id : nullptr;
  e->ev.event = type;
  e->ev.status = status;
  e->accounted = accounted != nullptr ? accounted : id;
  const size_t n = std::min(data_len, sizeof e->data);
  if (data != nullptr && n != 0) std::memcpy(e->data, data, n);
  if (conn != nullptr) {
    e->ev.param.conn = *conn;
    e->ev.param.conn.private_data = data != nullptr ? e->data : nullptr;
    e->ev.param.conn.private_data_len = static_cast<uint8_t>(data != nullptr ? n : 0);
  } else if (ud != nullptr) {
    e->ev.param.ud = *ud;  // MULTICAST_JOIN: private_data is the user's context, kept as given
    if (data != nullptr) {
      e->ev.param.ud.private_data = e->data;
      e->ev.param.ud.private_data_len = static_cast<uint8_t>(n);
    }
  }
  Channel* c = (listen_id != nullptr ? listen_id : id)->channel;
  c->push(&e->ev);
}

}  // namespace softhca::rdmacm

using namespace softhca::rdmacm;
namespace cm = softhca::cm;

extern "C" {

rdma_event_channel* rdma_create_event_channel(void) {
  if (Library::get() == nullptr) return nullptr;
  Channel* c = new_channel(false);
  return c != nullptr ? &c->ch : nullptr;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
  if (channel != nullptr) delete_channel(to_channel(channel));
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
  if (channel == nullptr || event == nullptr) return fail(EINVAL);
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  Channel* c = to_channel(channel);
  while (true) {
    char b;
    c->readers.fetch_add(1);
    const ssize_t n = ::read(c->ch.fd, &b, 1);
    c->readers.fetch_sub(1);
    if (n < 0) return -1;            // EAGAIN (O_NONBLOCK, nothing queued), EINTR, ...
    if (n == 0) return fail(ENODEV);  // the writer is gone: the channel is being destroyed
    // Taken and counted under the library's lock, so that rdma_destroy_id sees the event either
    // queued (and drops it) or handed out (and waits for its ack).
    std::lock_guard<std::mutex> g(lib->mutex);
    if (c->pop(event) == 0) {
      ++reinterpret_cast<EventPriv*>(*event)->accounted->events_reported;
      lib->handed_out.insert(*event);
      // librdmacm's rdma_get_cm_event moves a rejected id's QP to ERR before handing the event out.
      if ((*event)->event == RDMA_CM_EVENT_REJECTED) qp_to_error(*priv((*event)->id));
      return 0;
    }
    // The event of the byte was dropped meanwhile (its id destroyed, or migrated): read on.
  }
}

int rdma_ack_cm_event(rdma_cm_event* event) {
  if (event == nullptr) return fail(EINVAL);
  auto* e = reinterpret_cast<EventPriv*>(event);
  Library* lib = Library::get();
  if (lib == nullptr) return -1;
  {
    // An event acknowledged twice, or never handed out, is refused rather than freed again (the
    // real library would free it twice).
    std::lock_guard<std::mutex> g(lib->mutex);
    if (lib->handed_out.erase(event) == 0) return fail(EINVAL);
    ++e->accounted->events_acked;
    lib->acked.notify_all();
  }
  delete e;
  return 0;
}

const char* rdma_event_str(rdma_cm_event_type event) {
  switch (event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

}  // extern "C"
