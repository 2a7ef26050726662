// Packet introspection (`gitlb monitor`): loads xdp_monitor.o's fentry/fexit programs against a running XDP
// program (by fd), attaches them, and reads their samples from the perf event array. Synchronous polling with a
// short timeout: the monitor is a command-line tool, not the daemon, so blocking its event loop for a poll is fine.
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

struct MonitorHolder {
  bpf_object* obj = nullptr;
  std::vector<bpf_link*> links;
  perf_buffer* pb = nullptr;
  std::vector<Sample> pending;
  uint64_t lost = 0;
  // A poll collects at most this many samples; the rest stay in the perf buffer for the next poll.
  size_t maxPerPoll = 4096;
};

void CloseMonitor(MonitorHolder* h) {
  if (h->pb) perf_buffer__free(h->pb);
  h->pb = nullptr;
  for (bpf_link* l : h->links) bpf_link__destroy(l);
  h->links.clear();
  if (h->obj) bpf_object__close(h->obj);
  h->obj = nullptr;
}

void FinalizeMonitor(Napi::Env, MonitorHolder* h) {
  CloseMonitor(h);
  delete h;
}

void OnSample(void* ctx, int cpu, void* data, __u32 size) {
  auto* h = static_cast<MonitorHolder*>(ctx);
  if (h->pending.size() >= h->maxPerPoll) {
    h->lost++;
    return;
  }
  const uint8_t* p = static_cast<const uint8_t*>(data);
  h->pending.push_back(Sample{cpu, std::vector<uint8_t>(p, p + size)});
}

void OnLost(void* ctx, int, __u64 count) { static_cast<MonitorHolder*>(ctx)->lost += count; }

MonitorHolder* ArgMonitor(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsExternal()) throw Napi::TypeError::New(info.Env(), "monitor handle expected");
  return info[0].As<Napi::External<MonitorHolder>>().Data();
}

// monitorOpen(objectPath, targetProgFd, targetFunc, { snaplen, pages }) -> handle
Napi::Value MonitorOpen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ArgString(info, 0, "object path");
  int target = ArgFd(info, 1);
  std::string func = ArgString(info, 2, "target function");
  uint32_t snaplen = 256, pages = 64;
  if (info.Length() > 3 && info[3].IsObject()) {
    Napi::Object o = info[3].As<Napi::Object>();
    if (o.Get("snaplen").IsNumber()) snaplen = o.Get("snaplen").As<Napi::Number>().Uint32Value();
    if (o.Get("pages").IsNumber()) pages = o.Get("pages").As<Napi::Number>().Uint32Value();
  }
  std::string log;
  SetLogSink(&log);
  auto* h = new MonitorHolder();
  auto fail = [&](int err, const std::string& what) {
    SetLogSink(nullptr);
    CloseMonitor(h);
    delete h;
    ThrowErrno(env, err, what + (log.empty() ? "" : ": " + log.substr(0, 2000)));
  };
  h->obj = bpf_object__open_file(path.c_str(), nullptr);
  if (!h->obj) {
    int err = errno;
    h->obj = nullptr;
    fail(err, "open " + path);
  }
  bpf_program* prog;
  bpf_object__for_each_program(prog, h->obj) {
    int err = bpf_program__set_attach_target(prog, target, func.c_str());
    if (err) fail(-err, "attach target " + func);
  }
  bpf_map* rodata = nullptr;
  bpf_map* m;
  bpf_object__for_each_map(m, h->obj) {
    const char* n = bpf_map__name(m);
    size_t len = strlen(n);
    if (len >= 7 && strcmp(n + len - 7, ".rodata") == 0) rodata = m;
  }
  if (rodata) {
    size_t size = 0;
    const void* v = bpf_map__initial_value(rodata, &size);
    if (v && size >= sizeof(uint32_t)) {
      // snaplen is the object's only read-only global, at offset 0.
      std::vector<uint8_t> copy(static_cast<const uint8_t*>(v), static_cast<const uint8_t*>(v) + size);
      memcpy(copy.data(), &snaplen, sizeof(uint32_t));
      int err = bpf_map__set_initial_value(rodata, copy.data(), copy.size());
      if (err) fail(-err, "set snaplen");
    }
  }
  int err = bpf_object__load(h->obj);
  if (err) fail(-err, "load " + path);
  bpf_object__for_each_program(prog, h->obj) {
    bpf_link* l = bpf_program__attach_trace(prog);
    if (!l) fail(errno, std::string("attach ") + bpf_program__name(prog));
    h->links.push_back(l);
  }
  bpf_map* events = bpf_object__find_map_by_name(h->obj, "gitlb_monitor_events");
  if (!events) fail(ENOENT, "map gitlb_monitor_events not found");
  h->pb = perf_buffer__new(bpf_map__fd(events), pages, OnSample, OnLost, h, nullptr);
  if (!h->pb) fail(errno, "perf buffer");
  SetLogSink(nullptr);
  return Napi::External<MonitorHolder>::New(env, h, FinalizeMonitor);
}

// monitorPoll(handle, timeoutMs) -> { samples: [{ cpu, data: Buffer }], lost }
Napi::Value MonitorPoll(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  MonitorHolder* h = ArgMonitor(info);
  int timeout = ArgInt(info, 1, "timeoutMs");
  if (!h->pb) ThrowErrno(env, EBADF, "monitor is closed");
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

Napi::Value MonitorClose(const Napi::CallbackInfo& info) {
  CloseMonitor(ArgMonitor(info));
  return info.Env().Undefined();
}

}  // namespace

void InitMonitor(Napi::Env env, Napi::Object exports) {
  exports.Set("monitorOpen", Napi::Function::New(env, MonitorOpen, "monitorOpen"));
  exports.Set("monitorPoll", Napi::Function::New(env, MonitorPoll, "monitorPoll"));
  exports.Set("monitorClose", Napi::Function::New(env, MonitorClose, "monitorClose"));
}

}  // namespace gitlb
