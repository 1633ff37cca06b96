// softhca's librdmacm.so.1 (docs/rdma-cm.md): the rdma_cm ABI of rdma-core 44 over softhca's
// libibverbs and the connection manager of src/cm. The library's own state, shared by its files:
// - Device: one per softhca device, opened once per process (the contexts rdma_get_devices and
//   id->verbs give), with its default PD and its MAD agent — a UD QP that QP1's CM MADs for this
//   process reach (docs/cm.md, "QP1 on a shared device") — and the connection table of src/cm.
// - Channel: an event channel; its fd is one end of a socket pair, one byte per queued event, so it
//   polls, epolls and honours O_NONBLOCK as the kernel's rdma_cm fd does.
// - IdPriv: an rdma_cm_id and what the library knows of it (state, binding, connection, events).
// One lock (Library::mutex) guards all of it: the calls of the API and the CM thread (agent.cc),
// which receives MADs and runs the CM timers. Event delivery never waits on the lock a reader holds.
#pragma once
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/socket.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cm/connection_table.h"
#include "cm/messages.h"
#include "cm/qp_attributes.h"

namespace softhca::rdmacm {

struct IdPriv;
struct Device;

// Where a MAD goes: a port, by LID (InfiniBand) or by GID (Ethernet, and global IB paths).
struct PeerAddress {
  uint16_t lid = 0;
  bool global = false;
  ibv_gid gid{};
  bool operator<(const PeerAddress& o) const;
};

struct Device {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;  // the default PD: id->pd of the ids bound to this device
  // The XRC domain of the XRC QPs and SRQs made on this device (opened with fd -1 on first use,
  // as librdmacm's per-device XRCD; closed with the device).
  ibv_xrcd* xrcd = nullptr;
  ibv_device_attr attr{};
  ibv_port_attr port{};
  ibv_gid gid{};           // GID 0
  uint32_t ipv4_be = 0;    // the host's address (docs/addresses.md)
  bool ethernet = false;
  // The MAD agent: a UD QP with the GSI's Q_Key, receive buffers for MADs and send slots.
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;       // receives (armed, on `channel`)
  ibv_cq* send_cq = nullptr;  // sends, reaped before each send
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  uint8_t* buf = nullptr;
  uint32_t agent = 0;       // the agent number the device gave (the top bits of our CM ids)
  uint32_t next_send = 0;   // the send slot the next MAD takes
  uint32_t sends_out = 0;   // posted and not completed
  std::map<PeerAddress, ibv_ah*> ahs;
  std::unique_ptr<cm::ConnectionTable> table;

  static constexpr uint32_t kRecvSlots = 64;
  static constexpr uint32_t kSendSlots = 64;
  static constexpr uint32_t kSlotBytes = 40 + 256;  // GRH room + one MAD
};

class Channel {
 public:
  rdma_event_channel ch{};  // first: the handle applications hold is &ch
  bool sync = false;        // the private channel of a synchronous id
  int writer = -1;          // the other end of the socket pair
  std::atomic<int> readers{0};  // threads inside rdma_get_cm_event on it

  // Queues an event (the library lock may be held); wakes a reader.
  void push(rdma_cm_event* ev);
  // Takes the first event: blocks while there is none unless the fd is non-blocking (EAGAIN).
  // -1 with errno, or 0.
  int pop(rdma_cm_event** out);
  // Moves the queued events of `id` to `to` (rdma_migrate_id).
  void move_events_of(rdma_cm_id* id, Channel& to);
  // Takes out the queued events `pred` selects (rdma_destroy_id drops them); the caller owns them.
  template <class Pred>
  std::vector<rdma_cm_event*> take_events(Pred&& pred);
  // True when an event of `id` is queued, not read yet.
  bool has_event_of(const rdma_cm_id* id);

 private:
  std::mutex m_;
  std::deque<rdma_cm_event*> q_;
};

// Posts receive slot `slot` of the agent again (devices.cc).
bool post_agent_recv(Device& d, uint32_t slot);

Channel* to_channel(rdma_event_channel* ch);
Channel* new_channel(bool sync);  // nullptr with errno
void delete_channel(Channel* c);

// The kernel rdma_cm id states (rdmacm.md §3.1).
enum class IdState : uint8_t {
  kIdle,
  kAddrQuery,
  kAddrResolved,
  kRouteQuery,
  kRouteResolved,
  kConnect,
  kDisconnect,
  kAddrBound,
  kListen,
  kDestroying,
};

struct IdPriv {
  rdma_cm_id id{};  // first: rdma_cm_id* and IdPriv* share an address
  IdState state = IdState::kIdle;
  Channel* channel = nullptr;
  Device* dev = nullptr;  // the device it is bound to (id.verbs), if any
  // The service ID it bound (rdma_cm's port space << 16 | port) and on which devices' agents.
  uint64_t service_id = 0;
  std::vector<Device*> bound_on;
  bool reuse_addr = false;
  bool af_only = false;
  std::optional<uint8_t> tos;
  std::optional<uint8_t> ack_timeout;
  int backlog = 0;
  IdPriv* listener = nullptr;  // a new passive id: the listener whose CONNECT_REQUEST made it
  // The connection (src/cm) and where its peer is.
  uint32_t comm_id = 0;  // 0: none
  PeerAddress peer{};
  uint32_t peer_qpn = 0;
  ibv_sa_path_rec path{};
  std::optional<cm::Req> req;  // the REQ sent (active) or received (passive)
  std::optional<cm::Rep> rep;  // the REP received (active) or sent (passive)
  uint8_t peer_responder_resources = 0;  // from the REQ: the defaults of rdma_accept
  uint8_t peer_initiator_depth = 0;
  uint32_t psn = 0;          // the starting PSN this side's receive queue expects
  bool disconnected = false; // DISCONNECTED was reported
  bool connected_once = false;
  bool tracked = false;      // the device knows the connection (track())
  // UD (SIDR).
  uint32_t qkey = RDMA_UDP_QKEY;
  uint32_t sidr_request_id = 0;
  uint64_t sidr_sender_key = 0;  // passive: who sent the SIDR_REQ (ConnectionTable::sidr_reply)
  // Events read by the application (rdma_get_cm_event) and acknowledged: rdma_destroy_id and
  // rdma_migrate_id wait for the difference to be 0. Events still queued are not counted: the
  // kernel's ucma counts an event when GET_EVENT hands it out, and drops the queued ones of a
  // destroyed id (rdmacm.md §3.3).
  uint32_t events_reported = 0;
  uint32_t events_acked = 0;
  // rdma_create_ep: the QP attributes a listener gives the ids of rdma_get_request.
  std::optional<ibv_qp_init_attr> ep_qp_attr;
  std::vector<uint8_t> connect_data;  // rai->ai_connect, prepended in rdma_connect
  bool own_send_cq = false;
  bool own_recv_cq = false;
  // Multicast groups joined (multicast.cc).
  struct Join {
    sockaddr_storage addr{};
    ibv_gid mgid{};
    uint16_t mlid = 0;
    bool send_only = false;
    bool attached = false;  // id.qp attached to the group
  };
  std::vector<Join> joins;
};

inline IdPriv* priv(rdma_cm_id* id) { return reinterpret_cast<IdPriv*>(id); }

template <class Pred>
std::vector<rdma_cm_event*> Channel::take_events(Pred&& pred) {
  std::vector<rdma_cm_event*> taken;
  {
    std::lock_guard<std::mutex> g(m_);
    for (auto it = q_.begin(); it != q_.end();) {
      if (pred(*it)) {
        taken.push_back(*it);
        it = q_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // One byte per event left the queue. A reader that took a byte already and waits for the lock
  // finds the queue shorter; rdma_get_cm_event then reads again.
  for (size_t i = 0; i < taken.size(); ++i) {
    char b;
    (void)::recv(ch.fd, &b, 1, MSG_DONTWAIT);
  }
  return taken;
}

// An event as the library allocates it: the event, then the private data it points into.
struct EventPriv {
  rdma_cm_event ev{};  // first
  IdPriv* accounted = nullptr;  // the id whose count its ack raises (the listener for CONNECT_REQUEST)
  uint8_t data[256] = {};
};

class Library {
 public:
  // The process's library, initialised on first use (devices opened, the CM thread started).
  // nullptr with errno ENODEV when there is no softhca device.
  static Library* get();

  std::mutex mutex;
  std::condition_variable acked;  // signalled when an event is acknowledged
  std::vector<std::unique_ptr<Device>> devices;

  // ---- with the lock held ----
  Device* device_of(ibv_context* ctx);
  Device* device_with_ipv4(uint32_t ipv4_be);
  Device* device_with_lid(uint16_t lid);
  Device* first_device() { return devices.empty() ? nullptr : devices.front().get(); }
  // Queues an event for `id` on its channel, counted for `accounted` (id itself by default).
  // `data` is copied into the event and param.conn/ud.private_data points at it.
  void report(IdPriv* id, rdma_cm_event_type type, int status, const rdma_conn_param* conn = nullptr,
              const rdma_ud_param* ud = nullptr, const uint8_t* data = nullptr, size_t data_len = 0,
              IdPriv* accounted = nullptr, IdPriv* listen_id = nullptr);
  // Sends the actions' MADs and turns their events into rdma_cm events (agent.cc).
  void run(Device& dev, const cm::Actions& actions, const PeerAddress* sender = nullptr);
  // One CM event of a table's actions, as the rdma_cm event(s) it makes (events.cc).
  void on_cm_event(Device& dev, const cm::Event& e, const PeerAddress* sender);
  // Wakes the CM thread to recompute its next deadline.
  void kick();
  // Ends the CM thread (at exit).
  void stop();
  // Takes what the agents received by now, in the calling thread: a MAD to an agent of this process
  // is delivered before the send that carried it returns (the device loops it back), so a call that
  // sent one handles the answers at once instead of waking the CM thread for each (agent.cc).
  void pump();
  std::set<IdPriv*> ids;  // every live id
  std::set<rdma_cm_event*> handed_out;  // events rdma_get_cm_event gave and nobody acknowledged yet
  // The ids, for the CM thread to find the one a connection belongs to, and where each
  // connection's peer is (kept after its id is destroyed: a DREQ is still retransmitted there).
  std::map<uint32_t, IdPriv*> by_comm_id;
  std::map<uint32_t, PeerAddress> peers;
  std::vector<IdPriv*> listeners;

 private:
  Library() = default;
  bool init();
  void thread_main();
  void on_mad(Device& dev, const ibv_wc& wc);

  int wake_fd_ = -1;
  bool pumping_ = false;
  std::atomic<bool> rescan_{false};  // kick(): the CM thread looks at the timers at once
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// ---- shared by the library's files (with the lock held) ----
// The device ends a tracked connection with a DREQ if this process goes before it does (agent.cc).
void track(IdPriv& id);
void untrack(IdPriv& id);
uint64_t sender_key_of(const PeerAddress& p);            // agent.cc
bool send_mad(Device& d, const PeerAddress& to, const cm::MadBytes& mad);
// The id's route toward a peer port on `dev`: ibaddr GIDs and P_Key, one path record (addresses.cc).
void fill_route(IdPriv& id, Device& dev, uint16_t peer_lid, const ibv_gid& peer_gid);
ibv_ah_attr ah_attr_of(const IdPriv& id);                 // toward the id's peer, from its route
// The id's QP through INIT (when in RESET), RTR and RTS with the CM's values (qp.cc); 0 or an errno.
int qp_to_rts(IdPriv& id, const cm::QpAttributes& a);
void qp_to_error(IdPriv& id);
// Waits for the next event of a synchronous id and keeps it in id->event (the lock not held):
// 0, or -1 with errno from the event (rdmacm.md §3.4).
int sync_wait(IdPriv& id);
// Binding (addresses.cc): the id's service ID (port space `ps` << 16 | port, ps 0: the id's own)
// on the agents of `on` (port 0: one is picked).
int bind_service(Library& lib, IdPriv& id, const std::vector<Device*>& on, uint16_t port, uint16_t ps = 0);

// ---- AF_IB addresses: a GID and a service ID (ib_address.cc, docs/rdma-cm.md) ----
bool is_af_ib(const sockaddr_storage& ss);
// The service ID an AF_IB address names (host order), as masked by its sid mask.
uint64_t ib_sid_of(const sockaddr_storage& ss);
// Writes an AF_IB address: P_Key 0xffff, `gid`, service ID `sid` with an all-ones mask.
void set_ib_address(sockaddr_storage& ss, const ibv_gid& gid, uint64_t sid);
// The port space an AF_IB bind of an id of port space `id_ps` selects from the service ID and
// mask (the kernel's choice: PS_IB for an IB id naming it, else TCP or UDP when named and
// compatible); 0 when none, which the kernel refuses with EPROTONOSUPPORT.
uint16_t ib_port_space(uint16_t id_ps, uint64_t sid, uint64_t mask);
// The host the GID names as `from` reaches it: a device of this process, or on InfiniBand the LID
// the softhca GUID in it carries (docs/addresses.md); 0 or EHOSTUNREACH.
int find_gid_peer(Library& lib, Device& from, const ibv_gid& gid, Device** local, uint16_t* lid);
void unbind_service(IdPriv& id);
// The kernel's cma_check_port: 0, or the errno of a conflict of `id` on service `sid` with another
// owner of it — EADDRNOTAVAIL when either address is a wildcard, EADDRINUSE when both are the
// same; owners that both set REUSEADDR share when `reuse`.
int port_conflict(const Library& lib, const IdPriv& id, uint64_t sid, bool reuse);
int bind_addr(Library& lib, IdPriv& id, const sockaddr* addr);
// Multicast (multicast.cc): the group's MGID and MLID for an IPv4 group address (host order), on
// this device's link; detaching every group an id joined (rdma_destroy_id).
void group_of(const Device& dev, uint32_t group_ip, ibv_gid* mgid, uint16_t* mlid);
void leave_all(IdPriv& id);

// Sets errno and returns -1: the convention of every librdmacm call.
inline int fail(int err) {
  errno = err;
  return -1;
}

// The library's clock for the CM timers (CLOCK_MONOTONIC).
Picoseconds now();

}  // namespace softhca::rdmacm
