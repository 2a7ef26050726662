// Perf event arrays read from Node (`gitlb monitor`): libbpf's perf_buffer, polled synchronously with a short
// timeout. The monitor is a command-line tool, not the daemon, so blocking its event loop for a poll is fine.
// Also: the ids of the maps a loaded program uses (to load a variant of it over the very same maps).
#include "common.h"

#include <cerrno>
#include <vector>

namespace gitlb {

namespace {

struct Sample {
  int cpu;
  std::vector<uint8_t> bytes;
};

struct PerfHolder {
  perf_buffer* pb = nullptr;
  std::vector<Sample> pending;
  uint64_t lost = 0;
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
  if (h->pending.size() >= kMaxPending) {
    h->lost++;
    return;
  }
  const uint8_t* p = static_cast<const uint8_t*>(data);
  h->pending.push_back(Sample{cpu, std::vector<uint8_t>(p, p + size)});
}

void OnLost(void* ctx, int, __u64 count) { static_cast<PerfHolder*>(ctx)->lost += count; }

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
  Napi::Array out = Napi::Array::New(env, h->pending.size());
  for (size_t i = 0; i < h->pending.size(); i++) {
    Napi::Object s = Napi::Object::New(env);
    s.Set("cpu", Napi::Number::New(env, h->pending[i].cpu));
    s.Set("data", Napi::Buffer<uint8_t>::Copy(env, h->pending[i].bytes.data(), h->pending[i].bytes.size()));
    out.Set(i, s);
  }
  h->pending.clear();
  Napi::Object r = Napi::Object::New(env);
  r.Set("samples", out);
  r.Set("lost", Napi::Number::New(env, static_cast<double>(h->lost)));
  h->lost = 0;
  return r;
}

Napi::Value PerfBufferClose(const Napi::CallbackInfo& info) {
  ClosePerf(ArgPerf(info));
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
  exports.Set("perfBufferOpen", Napi::Function::New(env, PerfBufferOpen, "perfBufferOpen"));
  exports.Set("perfBufferPoll", Napi::Function::New(env, PerfBufferPoll, "perfBufferPoll"));
  exports.Set("perfBufferClose", Napi::Function::New(env, PerfBufferClose, "perfBufferClose"));
  exports.Set("progMapIds", Napi::Function::New(env, ProgMapIds, "progMapIds"));
}

}  // namespace gitlb
