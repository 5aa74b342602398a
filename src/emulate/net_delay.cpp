// geotrain-netdelay: the latency half of the WAN emulator (jobs/emulate/),
// for kernels without sch_netem. iptables rules in the router namespace send
// each (source site, destination site) pair's packets to its own NFQUEUE;
// this program holds every packet of queue q for that queue's delay, in
// arrival order, then accepts it. One thread, one netlink socket, all queues.
// Shared links (a rank's NIC, a site's uplink, each direction) are FIFO
// links of a given rate that the packets of several queues cross: a packet
// leaves when every link it crosses has sent what arrived before it, and is
// dropped when that is more than kMaxBacklog away (a drop-tail buffer, so
// TCP backs off as at a real bottleneck). Its delay starts when it leaves.
//
//   geotrain-netdelay [--link LINK:BITS_PER_S ...] QUEUE:DELAY_MS[:LINK,LINK..] ...
//
// Prints "ready" once every queue is bound. Runs with real-time priority
// where allowed (busy-polling MPI ranks must not starve it). SIGTERM/SIGINT
// stop it; packets still held are dropped (and, by design, the rules then
// drop all traffic: an emulation that silently stops delaying would be wrong).
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>  // ppoll (_GNU_SOURCE, defined by g++)
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct HeldPacket {
  std::uint32_t id;
  Clock::time_point due;
};

struct SharedLink {
  double seconds_per_byte = 0;
  Clock::time_point free{};  // when it has sent everything that arrived so far
};

struct Queue {
  int number = 0;
  Clock::duration delay{};
  std::vector<SharedLink*> links;
  nfq_q_handle* handle = nullptr;
  std::deque<HeldPacket> held;
};

// A drop-tail buffer of this much sending time on a shared link: about a
// bandwidth-delay product of the emulated WANs (tens of ms).
constexpr auto kMaxBacklog = std::chrono::milliseconds(50);

// The packet's IP total length (its first bytes are copied), or an MTU.
std::size_t packet_bytes(nfq_data* data) {
  unsigned char* payload = nullptr;
  const int copied = nfq_get_payload(data, &payload);
  if (copied >= 4 && payload != nullptr) {
    const std::size_t length = (static_cast<std::size_t>(payload[2]) << 8) | payload[3];
    if (length > 0) return length;
  }
  return 1500;
}

volatile std::sig_atomic_t stop_requested = 0;
extern "C" void request_stop(int) { stop_requested = 1; }

int on_packet(nfq_q_handle* handle, nfgenmsg*, nfq_data* data, void* context) {
  auto* queue = static_cast<Queue*>(context);
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(data);
  if (header == nullptr) return 0;
  const std::uint32_t id = ntohl(header->packet_id);
  const auto now = Clock::now();
  auto leaves = now;
  for (const SharedLink* link : queue->links) leaves = std::max(leaves, link->free);
  if (leaves - now > kMaxBacklog) return nfq_set_verdict(handle, id, NF_DROP, 0, nullptr);
  if (!queue->links.empty()) {
    const double bytes = static_cast<double>(packet_bytes(data));
    for (SharedLink* link : queue->links) {
      link->free = leaves + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(bytes * link->seconds_per_byte));
    }
  }
  queue->held.push_back({id, leaves + queue->delay});
  return 0;
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "geotrain-netdelay: %s\n", message.c_str());
  std::exit(1);
}

// --link LINK:BITS_PER_S and QUEUE:DELAY_MS[:LINK,LINK..] arguments; false
// (after a message) on a bad one. `links` is sized before any queue points into it.
bool parse_arguments(int argc, char** argv, std::vector<SharedLink>* links, std::vector<Queue>* queues) {
  std::vector<int> link_ids;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--link") != 0) continue;
    unsigned id = 0;
    double bits_per_s = 0;
    char tail = 0;
    if (std::sscanf(argv[i + 1], "%u:%lf%c", &id, &bits_per_s, &tail) != 2 || !(bits_per_s > 0)) {
      std::fprintf(stderr, "geotrain-netdelay: argument %d: '%s' is not LINK:BITS_PER_S\n", i + 1, argv[i + 1]);
      return false;
    }
    link_ids.push_back(static_cast<int>(id));
    links->push_back({8.0 / bits_per_s, {}});
  }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--link") == 0) {
      ++i;
      continue;
    }
    unsigned number = 0;
    double delay_ms = 0;
    int used = 0;
    if (std::sscanf(argv[i], "%u:%lf%n", &number, &delay_ms, &used) != 2 || number > 65535 || !(delay_ms >= 0) ||
        delay_ms > 60000 || (argv[i][used] != '\0' && argv[i][used] != ':')) {
      std::fprintf(stderr, "geotrain-netdelay: argument %d: '%s' is not QUEUE:DELAY_MS[:LINK,..] (0-65535, 0-60000 ms)\n",
                   i, argv[i]);
      return false;
    }
    Queue q;
    q.number = static_cast<int>(number);
    q.delay = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(delay_ms));
    for (const char* at = argv[i] + used; *at != '\0';) {
      char* end = nullptr;
      const long id = std::strtol(at + 1, &end, 10);
      const auto found = std::find(link_ids.begin(), link_ids.end(), static_cast<int>(id));
      if (end == at + 1 || found == link_ids.end() || (*end != '\0' && *end != ',')) {
        std::fprintf(stderr, "geotrain-netdelay: argument %d: '%s' names a link not given with --link\n", i, argv[i]);
        return false;
      }
      q.links.push_back(&(*links)[static_cast<std::size_t>(found - link_ids.begin())]);
      at = end;
    }
    queues->push_back(std::move(q));
  }
  return !queues->empty();
}

void ask_for_real_time_priority() {
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // without real-time priority, wake-ups stay precise too
  sched_param priority{};
  priority.sched_priority = 50;
  if (sched_setscheduler(0, SCHED_FIFO, &priority) != 0) {
    std::fprintf(stderr, "geotrain-netdelay: no real-time priority (%s); delays may stretch under load\n",
                 std::strerror(errno));
  }
}

nfq_handle* bind_queues(std::vector<Queue>& queues) {
  nfq_handle* handle = nfq_open();
  if (handle == nullptr) die("nfq_open failed (root? nfnetlink_queue in the kernel?)");
  nfq_unbind_pf(handle, AF_INET);
  if (nfq_bind_pf(handle, AF_INET) < 0) die("nfq_bind_pf failed");
  for (Queue& q : queues) {
    q.handle = nfq_create_queue(handle, static_cast<std::uint16_t>(q.number), on_packet, &q);
    if (q.handle == nullptr) die("queue " + std::to_string(q.number) + ": nfq_create_queue failed (in use?)");
    // The verdict needs the packet id; a shared link its length (the IP header's first bytes).
    if (q.links.empty() ? nfq_set_mode(q.handle, NFQNL_COPY_META, 0) < 0 : nfq_set_mode(q.handle, NFQNL_COPY_PACKET, 4) < 0) {
      die("nfq_set_mode failed");
    }
    nfq_set_queue_maxlen(q.handle, 1 << 16);
    nfq_set_queue_flags(q.handle, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);  // large segments stay whole
  }
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 64u << 20);
  return handle;
}

// Packets due this close together leave in one wake-up: far below the
// emulated latencies, and it keeps a stream of packets from waking the
// program once per packet.
constexpr auto kReleaseEarly = std::chrono::microseconds(20);

// Accepts every packet whose delay is over, with one verdict per queue (a
// batch verdict accepts every id up to the newest released: a queue's
// packets share one delay, so they leave in arrival order); returns the next
// due time (Clock::time_point::max() when nothing is held).
Clock::time_point release_due_packets(std::vector<Queue>& queues) {
  Clock::time_point next = Clock::time_point::max();
  const auto now = Clock::now() + kReleaseEarly;
  for (Queue& q : queues) {
    bool released = false;
    std::uint32_t newest = 0;
    while (!q.held.empty() && q.held.front().due <= now) {
      newest = q.held.front().id;
      released = true;
      q.held.pop_front();
    }
    if (released) nfq_set_verdict_batch(q.handle, newest, NF_ACCEPT);
    if (!q.held.empty() && q.held.front().due < next) next = q.held.front().due;
  }
  return next;
}

// Hands every waiting netlink message to on_packet.
void take_new_packets(nfq_handle* handle, int fd, std::vector<char>& buffer) {
  for (;;) {
    const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n > 0) {
      nfq_handle_packet(handle, buffer.data(), static_cast<int>(n));
      continue;
    }
    if (n < 0 && errno == ENOBUFS) {
      std::fprintf(stderr, "geotrain-netdelay: the kernel dropped queued packets (ENOBUFS)\n");
      continue;
    }
    return;  // EAGAIN: drained
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<SharedLink> links;
  std::vector<Queue> queues;
  if (!parse_arguments(argc, argv, &links, &queues)) {
    std::fprintf(stderr, "usage: geotrain-netdelay [--link LINK:BITS_PER_S ...] QUEUE:DELAY_MS[:LINK,LINK..] ...\n");
    return 2;
  }
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
  ask_for_real_time_priority();
  nfq_handle* handle = bind_queues(queues);
  const int fd = nfq_fd(handle);
  std::printf("ready\n");
  std::fflush(stdout);

  std::vector<char> buffer(1 << 16);
  while (!stop_requested) {
    const Clock::time_point next = release_due_packets(queues);
    // Sleep until the next packet is due, to the nanosecond (a real-time
    // task's timers have no slack), instead of spinning through its last
    // millisecond: spinning took most of a core from the ranks under load.
    std::chrono::nanoseconds wait = std::chrono::milliseconds(100);
    if (next != Clock::time_point::max()) wait = std::max(std::chrono::nanoseconds(0), next - Clock::now());
    const timespec timeout{static_cast<time_t>(wait.count() / 1000000000),
                           static_cast<long>(wait.count() % 1000000000)};
    pollfd p{fd, POLLIN, 0};
    const int ready = ppoll(&p, 1, &timeout, nullptr);
    if (ready < 0 && errno != EINTR) die(std::string("poll: ") + std::strerror(errno));
    if (ready > 0) take_new_packets(handle, fd, buffer);
  }
  for (Queue& q : queues) nfq_destroy_queue(q.handle);
  nfq_close(handle);
  return 0;
}
