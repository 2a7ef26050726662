/* Map keys and values of the backend-node TC programs. The TypeScript codecs in src/bpf/backend/codec.ts
 * mirror these byte for byte and are checked against the object's BTF at load (checkBtfLayout).
 * Addresses are in network order in a 16-byte field (IPv4: first 4 bytes, rest zero); ports are network order,
 * so the programs compare packet fields without byte swaps. */
#ifndef GITLB_BACKEND_STRUCTS_H
#define GITLB_BACKEND_STRUCTS_H

#include <linux/types.h>

/* A VIP served on this node. Two kinds of entry share the map:
 *  - address entries (port 0, proto 0): "decapsulate IP-in-IP to this address" (ipip services);
 *  - listener entries (port, proto set): "trust the ipopt option naming this VIP:port" (ipopt services). */
struct be_vip_key {
  __u8 addr[16];
  __be16 port;
  __u8 proto;
  __u8 family; /* 4 or 6 */
};

struct be_vip_value {
  __be16 target_port; /* listener entries: the port the LB rewrote the destination to (0 = not checked) */
  __u8 flags;         /* BE_VIP_F_* */
  __u8 pad;
  /* Listener entries: the targetPort this entry had before the daemon last changed it (0 = none). lb nodes apply a
   * revision on their own schedule (probation first, maybe never when they refuse it), so options naming this
   * VIP:port keep arriving at the old port after the backend moved. They are trusted while prev_seen_ns is less
   * than BE_PREV_TARGET_GRACE_NS old; each one accepted renews it. The first 4 bytes are the layout of before
   * (4-byte values), so old pins migrate by zero-padding: no previous port. */
  __be16 prev_target_port;
  __u8 pad2[2];
  __u64 prev_seen_ns; /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) of the change, then of the last option accepted at the previous port */
};

/* An address of the cluster that IP-in-IP may come from (an lb node) or go to (this node). */
struct be_addr_key {
  __u8 addr[16];
  __u8 family; /* 4 or 6 */
  __u8 pad[3];
};

struct be_addr_value {
  __u8 flags; /* BE_ADDR_F_* */
  __u8 pad[3];
};

/* One ipopt flow as seen from the backend: the request's source (client) and destination (this real). */
struct be_conn_key {
  __u8 client[16];
  __u8 local[16];
  __be16 client_port;
  __be16 local_port;
  __u8 proto;
  __u8 family;
  __u8 pad[2];
};

/* What the replies of that flow must look like to the client: they come from VIP:port. */
struct be_conn_value {
  __u8 vip[16];
  __be16 vip_port;
  __u8 pad[6];
  __u64 last_seen_ns; /* bpf_ktime_get_ns() of the last request that carried the option */
};

#endif
