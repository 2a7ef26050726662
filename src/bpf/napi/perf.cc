// Events from BPF programs read from Node: perf event arrays (`gitlb capture`: libbpf's perf_buffer, polled
// synchronously with a short timeout; the command is a command-line tool, blocking its event loop for a poll is fine)
// and ring buffers (the daemon's connection-state sync: ring_buffer__consume, which never blocks; its many small
// records in one buffer). Also: the ids of the maps a loaded program uses (to load a variant of it
// over the very same maps).
#include "common.h"

#include <cerrno>
#include <cstring>
#include <vector>

namespace gitlb {

namespace {

struct Sample {
  int cpu;
  std::vector<uint8_t> bytes;
};

// Records read and not yet handed to JS, and how many were lost (by the kernel or past the bound).
struct EventQueue {
  std::vector<Sample> pending;
  uint64_t lost = 0;

  // { samples: [{ cpu, data }], lost }, then empty
  Napi::Object Take(Napi::Env env) {
    Napi::Array out = Napi::Array::New(env, pending.size());
    for (size_t i = 0; i < pending.size(); i++) {
      Napi::Object s = Napi::Object::New(env);
      s.Set("cpu", Napi::Number::New(env, pending[i].cpu));
      s.Set("data", Napi::Buffer<uint8_t>::Copy(env, pending[i].bytes.data(), pending[i].bytes.size()));
      out.Set(i, s);
    }
    pending.clear();
    Napi::Object r = Napi::Object::New(env);
    r.Set("samples", out);
    r.Set("lost", Napi::Number::New(env, static_cast<double>(lost)));
    lost = 0;
    return r;
  }
};

struct PerfHolder {
  perf_buffer* pb = nullptr;
  EventQueue q;
};

// A poll keeps at most this many samples; past it they count as lost (a slow reader cannot grow memory).
constexpr size_t kMaxPending = 8192;

void ClosePerf(PerfHolder* h) {
  if (h->pb) perf_buffer__free(h->pb);
  h->pb = nullptr;
}

void FinalizePerf(Napi::Env, PerfHolder* h) {
  ClosePerf(h);
  delete h;
}

void OnSample(void* ctx, int cpu, void* data, __u32 size) {
  auto* h = static_cast<PerfHolder*>(ctx);
  if (h->q.pending.size() >= kMaxPending) {
    h->q.lost++;
    return;
  }
  const uint8_t* p = static_cast<const uint8_t*>(data);
  h->q.pending.push_back(Sample{cpu, std::vector<uint8_t>(p, p + size)});
}

void OnLost(void* ctx, int, __u64 count) { static_cast<PerfHolder*>(ctx)->q.lost += count; }

PerfHolder* ArgPerf(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsExternal()) throw Napi::TypeError::New(info.Env(), "perf buffer handle expected");
  return info[0].As<Napi::External<PerfHolder>>().Data();
}

// perfBufferOpen(mapFd, pagesPerCpu) -> handle
Napi::Value PerfBufferOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0);
  uint32_t pages = ArgU32(info, 1, "pages per CPU");
  auto* h = new PerfHolder();
  h->pb = perf_buffer__new(fd, pages, OnSample, OnLost, h, nullptr);
  if (!h->pb) {
    int err = errno;
    delete h;
    ThrowErrno(env, err, "perf buffer");
  }
  return Napi::External<PerfHolder>::New(env, h, FinalizePerf);
}

// perfBufferPoll(handle, timeoutMs) -> { samples: [{ cpu, data }], lost }
Napi::Value PerfBufferPoll(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  PerfHolder* h = ArgPerf(info);
  int timeout = ArgInt(info, 1, "timeoutMs");
  if (!h->pb) ThrowErrno(env, EBADF, "perf buffer is closed");
  int n = perf_buffer__poll(h->pb, timeout);
  if (n < 0 && n != -EINTR) ThrowErrno(env, -n, "perf buffer poll");
  return h->q.Take(env);
}

Napi::Value PerfBufferClose(const Napi::CallbackInfo& info) {
  ClosePerf(ArgPerf(info));
  return info.Env().Undefined();
}

// A BPF ring buffer (BPF_MAP_TYPE_RINGBUF): one ring for all CPUs, consumed without waiting. Its records are many
// and small (connection-state sync: one per new flow), so they are handed over in one buffer, not one object each:
// each record as a little-endian u32 length, its bytes, and zero bytes up to the next multiple of 8.
struct RingHolder {
  ring_buffer* rb = nullptr;
  std::vector<uint8_t> buf;
  size_t count = 0;
  size_t max = 0;  // records one consume takes at most; the rest stay in the ring for the next
};

void CloseRing(RingHolder* h) {
  if (h->rb) ring_buffer__free(h->rb);
  h->rb = nullptr;
}

void FinalizeRing(Napi::Env, RingHolder* h) {
  CloseRing(h);
  delete h;
}

int OnRecord(void* ctx, void* data, size_t size) {
  auto* h = static_cast<RingHolder*>(ctx);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t len = static_cast<uint32_t>(size);
  size_t at = h->buf.size();
  h->buf.resize(at + ((4 + size + 7) & ~size_t(7)), 0);
  memcpy(h->buf.data() + at, &len, 4);
  memcpy(h->buf.data() + at + 4, p, size);
  h->count++;
  // a negative return stops ring_buffer__consume after this record (libbpf 1.1: only a negative one does); the
  // records behind it stay in the ring for the next consume
  return h->count >= h->max ? -ENOBUFS : 0;
}

RingHolder* ArgRing(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsExternal()) throw Napi::TypeError::New(info.Env(), "ring buffer handle expected");
  return info[0].As<Napi::External<RingHolder>>().Data();
}

// ringBufferOpen(mapFd) -> handle
Napi::Value RingBufferOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0);
  auto* h = new RingHolder();
  h->rb = ring_buffer__new(fd, OnRecord, h, nullptr);
  if (!h->rb) {
    int err = errno;
    delete h;
    ThrowErrno(env, err, "ring buffer");
  }
  return Napi::External<RingHolder>::New(env, h, FinalizeRing);
}

// ringBufferConsume(handle, maxRecords) -> { data, count }: what the ring holds now, up to maxRecords records, in one
// buffer (RingHolder); never waits.
Napi::Value RingBufferConsume(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  RingHolder* h = ArgRing(info);
  uint32_t max = ArgU32(info, 1, "maxRecords");
  if (!h->rb) ThrowErrno(env, EBADF, "ring buffer is closed");
  h->max = max ? max : 1;
  h->buf.clear();
  h->count = 0;
  int n = ring_buffer__consume(h->rb);
  if (n < 0 && n != -EINTR && n != -ENOBUFS) ThrowErrno(env, -n, "ring buffer consume");
  Napi::Object r = Napi::Object::New(env);
  r.Set("data", Napi::Buffer<uint8_t>::Copy(env, h->buf.data(), h->buf.size()));
  r.Set("count", Napi::Number::New(env, static_cast<double>(h->count)));
  h->buf.clear();
  h->count = 0;
  return r;
}

Napi::Value RingBufferClose(const Napi::CallbackInfo& info) {
  CloseRing(ArgRing(info));
  return info.Env().Undefined();
}

// progMapIds(progFd) -> number[]
Napi::Value ProgMapIds(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info, 0);
  bpf_prog_info pi = {};
  uint32_t len = sizeof(pi);
  if (bpf_obj_get_info_by_fd(fd, &pi, &len)) ThrowErrno(env, errno, "program info");
  std::vector<uint32_t> ids(pi.nr_map_ids);
  if (!ids.empty()) {
    uint32_t n = pi.nr_map_ids;
    pi = {};
    pi.nr_map_ids = n;
    pi.map_ids = reinterpret_cast<uint64_t>(ids.data());
    len = sizeof(pi);
    if (bpf_obj_get_info_by_fd(fd, &pi, &len)) ThrowErrno(env, errno, "program map ids");
    ids.resize(pi.nr_map_ids < n ? pi.nr_map_ids : n);
  }
  Napi::Array out = Napi::Array::New(env, ids.size());
  for (size_t i = 0; i < ids.size(); i++) out.Set(i, Napi::Number::New(env, ids[i]));
  return out;
}

}  // namespace

void InitPerf(Napi::Env env, Napi::Object exports) {
  ExportAll(env, exports, {
    {"perfBufferOpen", PerfBufferOpen},
    {"perfBufferPoll", PerfBufferPoll},
    {"perfBufferClose", PerfBufferClose},
    {"ringBufferOpen", RingBufferOpen},
    {"ringBufferConsume", RingBufferConsume},
    {"ringBufferClose", RingBufferClose},
    {"progMapIds", ProgMapIds},
  });
}

}  // namespace gitlb
