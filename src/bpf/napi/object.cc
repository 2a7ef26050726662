// BPF object lifecycle: open + configure (max_entries overrides, pin paths) +
// load off the main thread, close, and BTF struct layouts for codec checks.
#include "common.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <unistd.h>
#include <vector>

namespace gitlb {

namespace {

struct ObjHolder {
  bpf_object* obj = nullptr;
};

void FinalizeObj(Napi::Env, ObjHolder* h) {
  if (h->obj) bpf_object__close(h->obj);
  delete h;
}

struct MapDesc {
  std::string name, pinPath, btfKey, btfValue;
  int type, fd;
  uint32_t keySize, valueSize, maxEntries, flags;
  bool internal, reused;
};

struct ProgDesc {
  std::string name, section;
  int type, fd;
};

std::string BtfTypeName(const btf* b, uint32_t id) {
  if (!b || !id) return "";
  const btf_type* t = btf__type_by_id(b, id);
  while (t && (btf_is_typedef(t) || btf_is_mod(t)) && t->name_off == 0) t = btf__type_by_id(b, t->type);
  if (!t) return "";
  const char* n = btf__name_by_offset(b, t->name_off);
  std::string prefix = btf_is_struct(t) ? "struct " : btf_is_union(t) ? "union " : "";
  return n && *n ? prefix + n : "";
}

// Keeps the tail of the verifier output: the failing instruction and the
// reason are at the end, the rest is the path that led there.
std::string TrimVerifierLog(const std::string& log, size_t maxLines) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  size_t start = lines.size() > maxLines ? lines.size() - maxLines : 0;
  std::string out = start ? "...(" + std::to_string(start) + " lines trimmed)\n" : "";
  for (size_t i = start; i < lines.size(); i++) out += lines[i] + "\n";
  return out;
}

class LoadWorker : public Napi::AsyncWorker {
 public:
  LoadWorker(Napi::Env env, std::string path, std::string pinRoot, bool reuse, bool replaceIncompatible,
             std::map<std::string, uint32_t> maxEntries, std::map<std::string, int> mapFds)
      : Napi::AsyncWorker(env),
        deferred_(Napi::Promise::Deferred::New(env)),
        path_(std::move(path)),
        pinRoot_(std::move(pinRoot)),
        reuse_(reuse),
        replaceIncompatible_(replaceIncompatible),
        maxEntries_(std::move(maxEntries)),
        mapFds_(std::move(mapFds)) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    SetLogSink(&log_);
    Run();
    SetLogSink(nullptr);
    if (err_ && obj_) {
      bpf_object__close(obj_);
      obj_ = nullptr;
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (err_) {
      Napi::Error e = ErrnoError(env, err_, what_);
      std::string vlog = ExtractVerifierLog();
      e.Set("verifierLog", Napi::String::New(env, vlog));
      e.Set("libbpfLog", Napi::String::New(env, TrimVerifierLog(log_, 200)));
      if (!vlog.empty()) {
        std::string msg = e.Message() + "\n" + vlog;
        e.Set("message", Napi::String::New(env, msg));
      } else if (!log_.empty()) {
        std::string msg = e.Message() + "\n" + TrimVerifierLog(LastWarnings(), 8);
        e.Set("message", Napi::String::New(env, msg));
      }
      deferred_.Reject(e.Value());
      return;
    }
    auto* h = new ObjHolder{obj_};
    obj_ = nullptr;
    Napi::Object res = Napi::Object::New(env);
    res.Set("handle", Napi::External<ObjHolder>::New(env, h, FinalizeObj));
    Napi::Array maps = Napi::Array::New(env, maps_.size());
    for (size_t i = 0; i < maps_.size(); i++) {
      const MapDesc& m = maps_[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", m.name);
      o.Set("type", m.type);
      o.Set("fd", m.fd);
      o.Set("keySize", m.keySize);
      o.Set("valueSize", m.valueSize);
      o.Set("maxEntries", m.maxEntries);
      o.Set("flags", m.flags);
      o.Set("internal", m.internal);
      o.Set("pinPath", m.pinPath.empty() ? env.Null() : Napi::String::New(env, m.pinPath));
      o.Set("reused", m.reused);
      o.Set("btfKeyType", m.btfKey);
      o.Set("btfValueType", m.btfValue);
      maps.Set(i, o);
    }
    res.Set("maps", maps);
    Napi::Array progs = Napi::Array::New(env, progs_.size());
    for (size_t i = 0; i < progs_.size(); i++) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("name", progs_[i].name);
      o.Set("section", progs_[i].section);
      o.Set("type", progs_[i].type);
      o.Set("fd", progs_[i].fd);
      progs.Set(i, o);
    }
    res.Set("programs", progs);
    deferred_.Resolve(res);
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  void Fail(int err, const std::string& what) {
    err_ = err < 0 ? -err : err;
    if (!err_) err_ = EINVAL;
    what_ = what;
  }

  void Run() {
    obj_ = bpf_object__open_file(path_.c_str(), nullptr);
    if (!obj_) return Fail(errno, "open BPF object " + path_);
    for (auto& [name, n] : maxEntries_) {
      bpf_map* m = bpf_object__find_map_by_name(obj_, name.c_str());
      if (!m) return Fail(ENOENT, "max_entries override: map '" + name + "' not found in " + path_);
      int r = bpf_map__set_max_entries(m, n);
      if (r) return Fail(r, "set max_entries of map '" + name + "' to " + std::to_string(n));
    }
    // Maps handed in by fd (a resized table, src/bpf/dataplane/resize.ts): the program uses that map, and it is
    // neither looked up nor pinned under pinRoot (the caller pins it when the new program runs).
    for (auto& [name, fd] : mapFds_) {
      bpf_map* m = bpf_object__find_map_by_name(obj_, name.c_str());
      if (!m) return Fail(ENOENT, "map fd: map '" + name + "' not found in " + path_);
      int r = bpf_map__reuse_fd(m, fd);
      if (!r) r = bpf_map__set_pin_path(m, nullptr);
      if (r) return Fail(r, "use the given map for '" + name + "'");
    }
    std::map<std::string, bool> reused;
    if (!pinRoot_.empty()) {
      bpf_map* m;
      bpf_object__for_each_map(m, obj_) {
        if (bpf_map__is_internal(m)) continue;  // .rodata/.bss belong to one program build
        if (mapFds_.count(bpf_map__name(m))) continue;
        std::string pin = pinRoot_ + "/" + bpf_map__name(m);
        if (!reuse_ || (replaceIncompatible_ && !PinnedCompatible(m, pin))) {
          if (unlink(pin.c_str()) && errno != ENOENT) return Fail(errno, "remove old pin " + pin);
        }
        reused[bpf_map__name(m)] = access(pin.c_str(), F_OK) == 0;
        int r = bpf_map__set_pin_path(m, pin.c_str());
        if (r) return Fail(r, "set pin path of map '" + std::string(bpf_map__name(m)) + "'");
      }
    } else {
      // No pin root: nothing is pinned. Without this, libbpf pins LIBBPF_PIN_BY_NAME maps under its default
      // /sys/fs/bpf and silently reuses whatever another load left there (stale layouts break later loads).
      bpf_map* m;
      bpf_object__for_each_map(m, obj_) {
        int r = bpf_map__set_pin_path(m, nullptr);
        if (r) return Fail(r, "clear pin path of map '" + std::string(bpf_map__name(m)) + "'");
      }
    }
    int r = bpf_object__load(obj_);
    if (r) {
      std::string prog = FailedProgName();
      if (!prog.empty()) return Fail(r, "load " + path_ + ": program '" + prog + "' rejected by the verifier");
      std::string map = FailedMapName();
      if (!map.empty()) return Fail(r, "load " + path_ + ": map '" + map + "' could not be created or reused");
      return Fail(r, "load " + path_);
    }
    const btf* b = bpf_object__btf(obj_);
    bpf_map* m;
    bpf_object__for_each_map(m, obj_) {
      MapDesc d;
      d.name = bpf_map__name(m);
      d.type = bpf_map__type(m);
      d.fd = bpf_map__fd(m);
      d.keySize = bpf_map__key_size(m);
      d.valueSize = bpf_map__value_size(m);
      d.maxEntries = bpf_map__max_entries(m);
      d.flags = bpf_map__map_flags(m);
      d.internal = bpf_map__is_internal(m);
      d.pinPath = bpf_map__pin_path(m) ? bpf_map__pin_path(m) : "";
      d.reused = reused.count(d.name) ? reused[d.name] : false;
      d.btfKey = BtfTypeName(b, bpf_map__btf_key_type_id(m));
      d.btfValue = BtfTypeName(b, bpf_map__btf_value_type_id(m));
      maps_.push_back(d);
    }
    bpf_program* p;
    bpf_object__for_each_program(p, obj_) {
      progs_.push_back({bpf_program__name(p), bpf_program__section_name(p), (int)bpf_program__type(p),
                        bpf_program__fd(p)});
    }
  }

  // Same checks libbpf makes before reusing a pin; a mismatch would fail the load.
  bool PinnedCompatible(bpf_map* m, const std::string& pin) {
    int fd = bpf_obj_get(pin.c_str());
    if (fd < 0) return true;  // nothing (usable) pinned: nothing to replace
    bpf_map_info info = {};
    uint32_t len = sizeof info;
    int r = bpf_obj_get_info_by_fd(fd, &info, &len);
    close(fd);
    if (r) return false;
    return info.type == (uint32_t)bpf_map__type(m) && info.key_size == bpf_map__key_size(m) &&
           info.value_size == bpf_map__value_size(m) && info.max_entries == bpf_map__max_entries(m) &&
           info.map_flags == bpf_map__map_flags(m);
  }

  std::string Between(const std::string& s, const std::string& a, const std::string& b) {
    size_t i = s.find(a);
    if (i == std::string::npos) return "";
    i += a.size();
    size_t j = s.find(b, i);
    return s.substr(i, j == std::string::npos ? std::string::npos : j - i);
  }

  std::string FailedProgName() {
    size_t i = log_.find("-- BEGIN PROG LOAD LOG --");
    if (i == std::string::npos) i = log_.find("failed to load program");
    if (i == std::string::npos) return "";
    size_t q = log_.rfind("prog '", i);
    if (q == std::string::npos) return "";
    return Between(log_.substr(q), "prog '", "'");
  }

  std::string FailedMapName() {
    size_t i = log_.rfind("map '");
    if (i == std::string::npos) return "";
    return Between(log_.substr(i), "map '", "'");
  }

  std::string ExtractVerifierLog() {
    std::string v = Between(log_, "-- BEGIN PROG LOAD LOG --", "-- END PROG LOAD LOG --");
    return v.empty() ? "" : TrimVerifierLog(v, 30);
  }

  std::string LastWarnings() { return log_; }

  Napi::Promise::Deferred deferred_;
  std::string path_, pinRoot_;
  bool reuse_, replaceIncompatible_;
  std::map<std::string, uint32_t> maxEntries_;
  std::map<std::string, int> mapFds_;
  bpf_object* obj_ = nullptr;
  std::string log_, what_;
  int err_ = 0;
  std::vector<MapDesc> maps_;
  std::vector<ProgDesc> progs_;
};

ObjHolder* ArgObj(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsExternal())
    throw Napi::TypeError::New(info.Env(), "object handle expected");
  return info[0].As<Napi::External<ObjHolder>>().Data();
}

// loadObject(path, { pinRoot?, reusePinnedMaps?, replaceIncompatiblePins?, mapMaxEntries? }) -> Promise
Napi::Value LoadObject(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ArgString(info, 0, "path");
  std::string pinRoot;
  bool reuse = true, replace = false;
  std::map<std::string, uint32_t> maxEntries;
  std::map<std::string, int> mapFds;
  if (info.Length() > 1 && info[1].IsObject()) {
    Napi::Object o = info[1].As<Napi::Object>();
    if (o.Get("pinRoot").IsString()) pinRoot = o.Get("pinRoot").As<Napi::String>().Utf8Value();
    if (o.Get("reusePinnedMaps").IsBoolean()) reuse = o.Get("reusePinnedMaps").As<Napi::Boolean>();
    if (o.Get("replaceIncompatiblePins").IsBoolean()) replace = o.Get("replaceIncompatiblePins").As<Napi::Boolean>();
    Napi::Value me = o.Get("mapMaxEntries");
    if (me.IsObject()) {
      Napi::Object mo = me.As<Napi::Object>();
      Napi::Array keys = mo.GetPropertyNames();
      for (uint32_t i = 0; i < keys.Length(); i++) {
        std::string k = keys.Get(i).As<Napi::String>().Utf8Value();
        Napi::Value v = mo.Get(k);
        if (!v.IsNumber()) throw Napi::TypeError::New(env, "mapMaxEntries." + k + " must be a number");
        maxEntries[k] = v.As<Napi::Number>().Uint32Value();
      }
    }
    Napi::Value mf = o.Get("mapFds");
    if (mf.IsObject()) {
      Napi::Object mo = mf.As<Napi::Object>();
      Napi::Array keys = mo.GetPropertyNames();
      for (uint32_t i = 0; i < keys.Length(); i++) {
        std::string k = keys.Get(i).As<Napi::String>().Utf8Value();
        Napi::Value v = mo.Get(k);
        if (!v.IsNumber() || v.As<Napi::Number>().Int32Value() < 0) throw Napi::TypeError::New(env, "mapFds." + k + " must be a file descriptor");
        mapFds[k] = v.As<Napi::Number>().Int32Value();
      }
    }
  }
  auto* w = new LoadWorker(env, path, pinRoot, reuse, replace, std::move(maxEntries), std::move(mapFds));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

Napi::Value CloseObject(const Napi::CallbackInfo& info) {
  ObjHolder* h = ArgObj(info);
  if (h->obj) {
    bpf_object__close(h->obj);
    h->obj = nullptr;
  }
  return info.Env().Undefined();
}

// btfStruct(handle, name) -> { size, members: [{ name, offset (bytes), bitOffset, bitSize, size }] } | null
Napi::Value BtfStruct(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ObjHolder* h = ArgObj(info);
  std::string name = ArgString(info, 1, "struct name");
  if (!h->obj) ThrowErrno(env, EBADF, "BTF lookup on a closed object");
  const btf* b = bpf_object__btf(h->obj);
  if (!b) ThrowErrno(env, ENOENT, "object has no BTF (compile with -g)");
  int id = btf__find_by_name_kind(b, name.c_str(), BTF_KIND_STRUCT);
  if (id < 0) return env.Null();
  const btf_type* t = btf__type_by_id(b, id);
  Napi::Object res = Napi::Object::New(env);
  res.Set("size", t->size);
  Napi::Array members = Napi::Array::New(env);
  const btf_member* m = btf_members(t);
  for (uint16_t i = 0; i < btf_vlen(t); i++, m++) {
    Napi::Object o = Napi::Object::New(env);
    uint32_t bitOff = btf_member_bit_offset(t, i);
    o.Set("name", btf__name_by_offset(b, m->name_off));
    o.Set("offset", bitOff / 8);
    o.Set("bitOffset", bitOff);
    o.Set("bitSize", btf_member_bitfield_size(t, i));
    long long sz = btf__resolve_size(b, m->type);
    o.Set("size", (double)(sz < 0 ? -1 : sz));
    members.Set(i, o);
  }
  res.Set("members", members);
  return res;
}

// Creates one map off the main thread: a big hash table is preallocated by the kernel (about 0.7 s per million
// entries), which must not stall the daemon's event loop (health probes, metrics).
class CreateMapWorker : public Napi::AsyncWorker {
 public:
  CreateMapWorker(Napi::Env env, bpf_map_type type, std::string name, uint32_t ksize, uint32_t vsize, uint32_t max,
                  uint32_t flags, int btfFd, uint32_t btfKey, uint32_t btfValue)
      : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)), type_(type), name_(std::move(name)),
        ksize_(ksize), vsize_(vsize), max_(max), flags_(flags), btfFd_(btfFd), btfKey_(btfKey), btfValue_(btfValue) {}

  Napi::Promise Promise() { return deferred_.Promise(); }

  void Execute() override {
    LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = flags_);
    if (btfFd_ >= 0) {
      opts.btf_fd = btfFd_;
      opts.btf_key_type_id = btfKey_;
      opts.btf_value_type_id = btfValue_;
    }
    fd_ = bpf_map_create(type_, name_.c_str(), ksize_, vsize_, max_, &opts);
    if (fd_ < 0) err_ = errno;
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (fd_ < 0) {
      deferred_.Reject(ErrnoError(env, err_, "create map '" + name_ + "' of " + std::to_string(max_) + " entries").Value());
      return;
    }
    deferred_.Resolve(Napi::Number::New(env, fd_));
  }

  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  bpf_map_type type_;
  std::string name_;
  uint32_t ksize_, vsize_, max_, flags_;
  int btfFd_;
  uint32_t btfKey_, btfValue_;
  int fd_ = -1, err_ = 0;
};

// mapCreateLike(handle, name, maxEntries) -> Promise<fd>: a new map like the object's map `name` (type, key and
// value size, flags, the object's BTF types of key and value) with another max_entries. Used to resize a table.
// The object (and so its BTF fd) must stay open until the promise settles.
Napi::Value MapCreateLike(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ObjHolder* h = ArgObj(info);
  std::string name = ArgString(info, 1, "map name");
  uint32_t max = ArgU32(info, 2, "maxEntries");
  if (!h->obj) ThrowErrno(env, EBADF, "map create on a closed object");
  bpf_map* m = bpf_object__find_map_by_name(h->obj, name.c_str());
  if (!m) ThrowErrno(env, ENOENT, "map '" + name + "' not found in the object");
  const btf* b = bpf_object__btf(h->obj);
  bool withBtf = b && btf__fd(b) >= 0 && bpf_map__btf_value_type_id(m);
  auto* w = new CreateMapWorker(env, bpf_map__type(m), name, bpf_map__key_size(m), bpf_map__value_size(m), max,
                                bpf_map__map_flags(m), withBtf ? btf__fd(b) : -1,
                                withBtf ? bpf_map__btf_key_type_id(m) : 0, withBtf ? bpf_map__btf_value_type_id(m) : 0);
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

// objectMapNames(path) -> string[]: the names of an object file's maps (internal ones excluded), without loading it.
Napi::Value ObjectMapNames(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string path = ArgString(info, 0, "path");
  bpf_object* obj = bpf_object__open_file(path.c_str(), nullptr);
  if (!obj) ThrowErrno(env, errno, "open " + path);
  Napi::Array out = Napi::Array::New(env);
  uint32_t i = 0;
  bpf_map* m;
  bpf_object__for_each_map(m, obj) {
    if (!bpf_map__is_internal(m)) out.Set(i++, Napi::String::New(env, bpf_map__name(m)));
  }
  bpf_object__close(obj);
  return out;
}

}  // namespace

void InitObject(Napi::Env env, Napi::Object exports) {
  ExportAll(env, exports, {
    {"objectMapNames", ObjectMapNames},
    {"loadObject", LoadObject},
    {"closeObject", CloseObject},
    {"btfStruct", BtfStruct},
    {"mapCreateLike", MapCreateLike},
  });
}

}  // namespace gitlb
