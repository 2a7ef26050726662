// Sending one ready-made link-layer frame out of an interface (AF_PACKET): the gratuitous ARP and unsolicited
// neighbour advertisements of a SNAT address taken over from a lost lb node (src/reconciler/flows/snat-takeover.ts).
// The frame is built in TypeScript (src/bpf/announce-frames.ts); this only hands it to the interface.
#include "common.h"

#include <cerrno>
#include <cstring>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <sys/socket.h>
#include <unistd.h>

namespace gitlb {

// sendFrame(ifindex, frame): the frame starts with its Ethernet header (destination MAC first).
static Napi::Value SendFrame(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int ifindex = ArgInt(info, 0, "ifindex");
  Napi::Buffer<uint8_t> frame = ArgBuffer(info, 1, "frame");
  if (frame.Length() < 14 || frame.Length() > 1514) ThrowErrno(env, EINVAL, "sendFrame: a frame is 14..1514 bytes");
  int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0); // protocol 0: send only, receives nothing
  if (fd < 0) ThrowErrno(env, errno, "sendFrame: socket(AF_PACKET)");
  struct sockaddr_ll to;
  memset(&to, 0, sizeof(to));
  to.sll_family = AF_PACKET;
  to.sll_ifindex = ifindex;
  to.sll_halen = ETH_ALEN;
  memcpy(to.sll_addr, frame.Data(), ETH_ALEN);
  ssize_t n = sendto(fd, frame.Data(), frame.Length(), 0, reinterpret_cast<struct sockaddr*>(&to), sizeof(to));
  int err = errno;
  close(fd);
  if (n < 0) ThrowErrno(env, err, "sendFrame: sendto");
  return env.Undefined();
}

void InitRaw(Napi::Env env, Napi::Object exports) {
  ExportAll(env, exports, {
    {"sendFrame", SendFrame},
  });
}

}  // namespace gitlb
