// Map operations on raw fds. Sizes are validated in TypeScript before the call;
// here we only guard against buffers too small for the kernel to read or write.
#include "common.h"

#include <cerrno>
#include <cstring>
#include <sched.h>
#include <unistd.h>
#include <vector>

namespace gitlb {

namespace {

// mapLookup(fd, key, valueSize, flags) -> Buffer | null
Napi::Value MapLookup(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto key = ArgBuffer(info, 1, "key");
  uint32_t vsize = ArgU32(info, 2, "valueSize");
  uint64_t flags = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().Int64Value() : 0;
  auto out = Napi::Buffer<uint8_t>::New(env, vsize);
  int r = flags ? bpf_map_lookup_elem_flags(fd, key.Data(), out.Data(), flags)
                : bpf_map_lookup_elem(fd, key.Data(), out.Data());
  if (r) {
    if (errno == ENOENT) return env.Null();
    ThrowErrno(env, errno, "lookup");
  }
  return out;
}

// mapLookupInto(fd, key, out) -> boolean (no allocation: for hot paths)
Napi::Value MapLookupInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto key = ArgBuffer(info, 1, "key");
  auto out = ArgBuffer(info, 2, "out");
  if (bpf_map_lookup_elem(fd, key.Data(), out.Data())) {
    if (errno == ENOENT) return Napi::Boolean::New(env, false);
    ThrowErrno(env, errno, "lookup");
  }
  return Napi::Boolean::New(env, true);
}

Napi::Value MapUpdate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto key = ArgBuffer(info, 1, "key");
  auto value = ArgBuffer(info, 2, "value");
  uint64_t flags = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().Int64Value() : 0;
  if (bpf_map_update_elem(fd, key.Data(), value.Data(), flags)) ThrowErrno(env, errno, "update");
  return env.Undefined();
}

Napi::Value MapDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto key = ArgBuffer(info, 1, "key");
  if (bpf_map_delete_elem(fd, key.Data())) {
    if (errno == ENOENT) return Napi::Boolean::New(env, false);
    ThrowErrno(env, errno, "delete");
  }
  return Napi::Boolean::New(env, true);
}

// mapLookupAndDelete(fd, key, valueSize) -> Buffer | null: the value the kernel removed, read under the bucket's lock
// in the same call (hash maps), so a caller learns what it deleted, not what it read some time before
Napi::Value MapLookupAndDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto key = ArgBuffer(info, 1, "key");
  uint32_t vsize = ArgU32(info, 2, "valueSize");
  auto out = Napi::Buffer<uint8_t>::New(env, vsize);
  if (bpf_map_lookup_and_delete_elem(fd, key.Data(), out.Data())) {
    if (errno == ENOENT) return env.Null();
    ThrowErrno(env, errno, "lookup and delete");
  }
  return out;
}

// mapKeys(fd, keySize, limit) -> Buffer of all keys concatenated. When the program deletes
// the key we stand on, the kernel restarts from the first key; `limit` bounds the walk.
Napi::Value MapKeys(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  uint32_t ksize = ArgU32(info, 1, "keySize");
  double limit = info.Length() > 2 && info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : 1e12;
  size_t seen = 0;
  std::vector<uint8_t> all;
  std::vector<uint8_t> cur(ksize), next(ksize);
  bool first = true;
  for (;;) {
    int r = bpf_map_get_next_key(fd, first ? nullptr : cur.data(), next.data());
    if (r) {
      if (errno == ENOENT) break;
      ThrowErrno(env, errno, "iterate keys");
    }
    all.insert(all.end(), next.begin(), next.end());
    if ((double)++seen >= limit) break;
    cur.swap(next);
    first = false;
  }
  return Napi::Buffer<uint8_t>::Copy(env, all.data(), all.size());
}

// mapUpdateBatch(fd, keys, values, count, elemFlags) -> count
Napi::Value MapUpdateBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto keys = ArgBuffer(info, 1, "keys");
  auto values = ArgBuffer(info, 2, "values");
  uint32_t count = ArgU32(info, 3, "count");
  uint64_t flags = info.Length() > 4 && info[4].IsNumber() ? info[4].As<Napi::Number>().Int64Value() : 0;
  LIBBPF_OPTS(bpf_map_batch_opts, opts, .elem_flags = flags);
  uint32_t n = count;
  if (bpf_map_update_batch(fd, keys.Data(), values.Data(), &n, &opts)) {
    Napi::Error e = ErrnoError(env, errno, "batch update (" + std::to_string(n) + " of " + std::to_string(count) +
                                               " written)");
    e.Set("written", (double)n);
    throw e;
  }
  return Napi::Number::New(env, n);
}

// mapDeleteBatch(fd, keys, count) -> count
Napi::Value MapDeleteBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  auto keys = ArgBuffer(info, 1, "keys");
  uint32_t count = ArgU32(info, 2, "count");
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  uint32_t n = count;
  if (bpf_map_delete_batch(fd, keys.Data(), &n, &opts)) {
    Napi::Error e = ErrnoError(env, errno, "batch delete (" + std::to_string(n) + " of " + std::to_string(count) +
                                               " deleted)");
    e.Set("deleted", (double)n);
    throw e;
  }
  return Napi::Number::New(env, n);
}

// One step of a batched walk into kbuf/vbuf: at most `chunk` entries from `in` (nullptr: the start), the next token in
// `out`, the count read in `n`. A hash bucket larger than the chunk (ENOSPC with nothing read) doubles the chunk and
// the buffers and tries again. Returns 0, or the errno (ENOENT: the walk is done, the entries of this step still
// count).
int LookupBatchStep(int fd, bool del, const void* in, void* out, uint32_t ksize, uint32_t vsize, uint32_t& chunk,
                    std::vector<uint8_t>& kbuf, std::vector<uint8_t>& vbuf, uint32_t& n) {
  LIBBPF_OPTS(bpf_map_batch_opts, opts);
  for (;;) {
    n = chunk;
    int r = del ? bpf_map_lookup_and_delete_batch(fd, const_cast<void*>(in), out, kbuf.data(), vbuf.data(), &n, &opts)
                : bpf_map_lookup_batch(fd, const_cast<void*>(in), out, kbuf.data(), vbuf.data(), &n, &opts);
    int err = r ? errno : 0;
    if (err == ENOSPC && n == 0 && chunk < (1u << 20)) {
      chunk *= 2;
      kbuf.resize((size_t)ksize * chunk);
      vbuf.resize((size_t)vsize * chunk);
      continue;
    }
    return err;
  }
}

// mapLookupBatch(fd, keySize, valueSize, chunk, andDelete) -> { keys, values, count }
// Walks the whole map in chunks; ENOENT marks the end of the walk.
Napi::Value MapLookupBatch(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  uint32_t ksize = ArgU32(info, 1, "keySize");
  uint32_t vsize = ArgU32(info, 2, "valueSize");
  uint32_t chunk = ArgU32(info, 3, "chunk");
  bool del = info.Length() > 4 && info[4].ToBoolean();
  if (chunk == 0) chunk = 1;
  std::vector<uint8_t> keys, values;
  std::vector<uint8_t> kbuf((size_t)ksize * chunk), vbuf((size_t)vsize * chunk);
  // The batch token is map-specific (bucket index for hash maps, key for arrays).
  std::vector<uint8_t> inTok(ksize < 8 ? 8 : ksize), outTok(inTok.size());
  bool first = true;
  size_t total = 0;
  for (;;) {
    uint32_t n;
    int err = LookupBatchStep(fd, del, first ? nullptr : inTok.data(), outTok.data(), ksize, vsize, chunk, kbuf, vbuf, n);
    if (err && err != ENOENT) ThrowErrno(env, err, del ? "batch lookup-and-delete" : "batch lookup");
    keys.insert(keys.end(), kbuf.begin(), kbuf.begin() + (size_t)n * ksize);
    values.insert(values.end(), vbuf.begin(), vbuf.begin() + (size_t)n * vsize);
    total += n;
    if (err == ENOENT) break;
    inTok.swap(outTok);
    first = false;
  }
  Napi::Object res = Napi::Object::New(env);
  res.Set("keys", Napi::Buffer<uint8_t>::Copy(env, keys.data(), keys.size()));
  res.Set("values", Napi::Buffer<uint8_t>::Copy(env, values.data(), values.size()));
  res.Set("count", (double)total);
  return res;
}

// mapLookupBatchPage(fd, keySize, valueSize, chunk, token|null) -> { keys, values, count, token|null }
// One step of a batched walk: at most `chunk` entries (more only when one hash bucket holds more) from where `token`
// (the previous page's, null: the start) left off; token null in the answer: the walk is done. The caller may do
// other work between pages (the event loop): the token is a bucket index (hash maps) or a key (arrays), so entries
// added or deleted meanwhile never make a walk fail or repeat a bucket.
Napi::Value MapLookupBatchPage(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  uint32_t ksize = ArgU32(info, 1, "keySize");
  uint32_t vsize = ArgU32(info, 2, "valueSize");
  uint32_t chunk = ArgU32(info, 3, "chunk");
  if (chunk == 0) chunk = 1;
  std::vector<uint8_t> inTok(ksize < 8 ? 8 : ksize), outTok(inTok.size());
  bool first = info.Length() <= 4 || info[4].IsNull() || info[4].IsUndefined();
  if (!first) {
    auto t = ArgBuffer(info, 4, "token");
    if (t.Length() != inTok.size()) {
      throw Napi::TypeError::New(env, "token: not a token of this map's walk");
    }
    memcpy(inTok.data(), t.Data(), inTok.size());
  }
  std::vector<uint8_t> kbuf((size_t)ksize * chunk), vbuf((size_t)vsize * chunk);
  uint32_t n;
  int err = LookupBatchStep(fd, false, first ? nullptr : inTok.data(), outTok.data(), ksize, vsize, chunk, kbuf, vbuf, n);
  if (err && err != ENOENT) ThrowErrno(env, err, "batch lookup");
  Napi::Object res = Napi::Object::New(env);
  res.Set("keys", Napi::Buffer<uint8_t>::Copy(env, kbuf.data(), (size_t)n * ksize));
  res.Set("values", Napi::Buffer<uint8_t>::Copy(env, vbuf.data(), (size_t)n * vsize));
  res.Set("count", (double)n);
  if (err == ENOENT) res.Set("token", env.Null());
  else res.Set("token", Napi::Buffer<uint8_t>::Copy(env, outTok.data(), outTok.size()));
  return res;
}

// mapCreate(type, name, keySize, valueSize, maxEntries, flags, innerMapFd) -> fd
Napi::Value MapCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int type = ArgInt(info, 0, "type");
  std::string name = ArgString(info, 1, "name");
  uint32_t ksize = ArgU32(info, 2, "keySize");
  uint32_t vsize = ArgU32(info, 3, "valueSize");
  uint32_t max = ArgU32(info, 4, "maxEntries");
  uint32_t flags = info.Length() > 5 && info[5].IsNumber() ? info[5].As<Napi::Number>().Uint32Value() : 0;
  int inner = info.Length() > 6 && info[6].IsNumber() ? info[6].As<Napi::Number>().Int32Value() : -1;
  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = flags);
  if (inner >= 0) opts.inner_map_fd = inner;
  int fd = bpf_map_create((enum bpf_map_type)type, name.empty() ? nullptr : name.c_str(), ksize, vsize, max, &opts);
  if (fd < 0) ThrowErrno(env, errno, "create map '" + name + "'");
  return Napi::Number::New(env, fd);
}

// mapInfo(fd) -> { id, type, name, keySize, valueSize, maxEntries, flags }
Napi::Value MapInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  bpf_map_info mi = {};
  uint32_t len = sizeof mi;
  if (bpf_obj_get_info_by_fd(fd, &mi, &len)) ThrowErrno(env, errno, "map info");
  Napi::Object o = Napi::Object::New(env);
  o.Set("id", mi.id);
  o.Set("type", mi.type);
  o.Set("name", mi.name);
  o.Set("keySize", mi.key_size);
  o.Set("valueSize", mi.value_size);
  o.Set("maxEntries", mi.max_entries);
  o.Set("flags", mi.map_flags);
  return o;
}

Napi::Value ObjPin(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  std::string path = ArgString(info, 1, "path");
  if (bpf_obj_pin(fd, path.c_str())) ThrowErrno(env, errno, "pin at " + path);
  return env.Undefined();
}

Napi::Value ObjGet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ArgString(info, 0, "path");
  int fd = bpf_obj_get(path.c_str());
  if (fd < 0) ThrowErrno(env, errno, "open pinned object " + path);
  return Napi::Number::New(env, fd);
}

Napi::Value CloseFd(const Napi::CallbackInfo& info) {
  int fd = ArgFd(info);
  close(fd);
  return info.Env().Undefined();
}

Napi::Value MapGetFdById(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t id = ArgU32(info, 0, "id");
  int fd = bpf_map_get_fd_by_id(id);
  if (fd < 0) ThrowErrno(env, errno, "open map id " + std::to_string(id));
  return Napi::Number::New(env, fd);
}

// Makes a map read-only from the syscall side for good (BPF_MAP_FREEZE): no process can update or delete
// entries any more; programs still read it. Used for Maglev rings, which are never rewritten in place.
Napi::Value MapFreeze(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  if (bpf_map_freeze(fd) < 0) ThrowErrno(env, errno, "freeze map");
  return env.Undefined();
}

Napi::Value NumPossibleCpus(const Napi::CallbackInfo& info) {
  int n = libbpf_num_possible_cpus();
  if (n < 0) ThrowErrno(info.Env(), n, "count possible CPUs");
  return Napi::Number::New(info.Env(), n);
}

// threadCpus([cpus]) -> cpus: the CPUs the calling thread may run on; with an array, first sets them (the thread
// is moved at once when it is not on one of them). A per-CPU LRU map takes an insert from the syscall's CPU's
// share, so a copy into one is spread over the CPUs this way (src/bpf/dataplane/resize.ts).
Napi::Value ThreadCpus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set)) ThrowErrno(env, errno, "sched_getaffinity");
  Napi::Array prev = Napi::Array::New(env);
  uint32_t n = 0;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &set)) prev.Set(n++, c);
  if (info.Length() > 0 && info[0].IsArray()) {
    Napi::Array want = info[0].As<Napi::Array>();
    cpu_set_t next;
    CPU_ZERO(&next);
    for (uint32_t i = 0; i < want.Length(); i++) {
      int c = want.Get(i).As<Napi::Number>().Int32Value();
      if (c < 0 || c >= CPU_SETSIZE) ThrowErrno(env, EINVAL, "CPU " + std::to_string(c));
      CPU_SET(c, &next);
    }
    if (sched_setaffinity(0, sizeof next, &next)) ThrowErrno(env, errno, "sched_setaffinity");
  }
  return prev;
}

}  // namespace

void InitMaps(Napi::Env env, Napi::Object exports) {
  ExportAll(env, exports, {
    {"mapLookup", MapLookup},
    {"mapLookupInto", MapLookupInto},
    {"mapUpdate", MapUpdate},
    {"mapDelete", MapDelete},
    {"mapLookupAndDelete", MapLookupAndDelete},
    {"mapKeys", MapKeys},
    {"mapUpdateBatch", MapUpdateBatch},
    {"mapDeleteBatch", MapDeleteBatch},
    {"mapLookupBatch", MapLookupBatch},
    {"mapLookupBatchPage", MapLookupBatchPage},
    {"mapCreate", MapCreate},
    {"mapInfo", MapInfo},
    {"mapFreeze", MapFreeze},
    {"mapGetFdById", MapGetFdById},
    {"objPin", ObjPin},
    {"objGet", ObjGet},
    {"closeFd", CloseFd},
    {"numPossibleCpus", NumPossibleCpus},
    {"threadCpus", ThreadCpus},
  });
}

}  // namespace gitlb
