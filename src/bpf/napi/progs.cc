// Program operations: BPF_PROG_TEST_RUN, info, links (XDP, TCX) and queries of
// what is attached to an interface.
#include "common.h"

#include <cerrno>
#include <cstring>
#include <net/if.h>
#include <unistd.h>
#include <vector>

namespace gitlb {

namespace {

uint32_t OptU32(Napi::Object o, const char* k, uint32_t dflt) {
  Napi::Value v = o.Get(k);
  return v.IsNumber() ? v.As<Napi::Number>().Uint32Value() : dflt;
}

// progTestRun(fd, { data, repeat, dataOutSize, flags, ctxIn, ctxOutSize, cpu, batchSize })
//   -> { retval, data, durationNs, ctx }
Napi::Value ProgTestRun(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  if (info.Length() < 2 || !info[1].IsObject()) throw Napi::TypeError::New(env, "test run options expected");
  Napi::Object o = info[1].As<Napi::Object>();
  LIBBPF_OPTS(bpf_test_run_opts, opts);
  Napi::Value data = o.Get("data");
  Napi::Buffer<uint8_t> in;
  if (data.IsBuffer()) {
    in = data.As<Napi::Buffer<uint8_t>>();
    opts.data_in = in.Data();
    opts.data_size_in = in.Length();
  }
  uint32_t outSize = OptU32(o, "dataOutSize", 0);
  std::vector<uint8_t> out(outSize);
  if (outSize) {
    opts.data_out = out.data();
    opts.data_size_out = outSize;
  }
  Napi::Value ctx = o.Get("ctxIn");
  Napi::Buffer<uint8_t> ctxIn;
  if (ctx.IsBuffer()) {
    ctxIn = ctx.As<Napi::Buffer<uint8_t>>();
    opts.ctx_in = ctxIn.Data();
    opts.ctx_size_in = ctxIn.Length();
  }
  uint32_t ctxOutSize = OptU32(o, "ctxOutSize", 0);
  std::vector<uint8_t> ctxOut(ctxOutSize);
  if (ctxOutSize) {
    opts.ctx_out = ctxOut.data();
    opts.ctx_size_out = ctxOutSize;
  }
  opts.repeat = (int)OptU32(o, "repeat", 0);
  opts.flags = OptU32(o, "flags", 0);
  opts.cpu = OptU32(o, "cpu", 0);
  opts.batch_size = OptU32(o, "batchSize", 0);
  if (bpf_prog_test_run_opts(fd, &opts)) ThrowErrno(env, errno, "test run");
  Napi::Object res = Napi::Object::New(env);
  res.Set("retval", opts.retval);
  res.Set("durationNs", opts.duration);
  res.Set("data", Napi::Buffer<uint8_t>::Copy(env, out.data(), outSize ? opts.data_size_out : 0));
  res.Set("ctx", Napi::Buffer<uint8_t>::Copy(env, ctxOut.data(), ctxOutSize ? opts.ctx_size_out : 0));
  return res;
}

Napi::Object ProgInfoObject(Napi::Env env, int fd) {
  bpf_prog_info pi = {};
  uint32_t len = sizeof pi;
  if (bpf_obj_get_info_by_fd(fd, &pi, &len)) ThrowErrno(env, errno, "program info");
  Napi::Object o = Napi::Object::New(env);
  o.Set("id", pi.id);
  o.Set("type", pi.type);
  o.Set("name", pi.name);
  char tag[2 * BPF_TAG_SIZE + 1];
  for (int i = 0; i < BPF_TAG_SIZE; i++) snprintf(tag + 2 * i, 3, "%02x", pi.tag[i]);
  o.Set("tag", tag);
  // sizes of the verifier's translated program and of the JIT image: what the instruction cache has to hold
  o.Set("xlatedBytes", pi.xlated_prog_len);
  o.Set("jitedBytes", pi.jited_prog_len);
  // per function (the main function first, then each BPF-to-BPF subprogram, in instruction order): the translated
  // bytes from the func_info offsets, the JITed bytes from jited_func_lens
  Napi::Array funcs = Napi::Array::New(env);
  if (pi.nr_func_info > 0 && pi.func_info_rec_size >= sizeof(bpf_func_info)) {
    uint32_t n = pi.nr_func_info, rec = pi.func_info_rec_size, nj = pi.nr_jited_func_lens;
    std::vector<uint8_t> finfo(size_t(n) * rec);
    std::vector<uint32_t> jlens(nj ? nj : 1);
    bpf_prog_info p2 = {};
    uint32_t len2 = sizeof p2;
    p2.nr_func_info = n;
    p2.func_info_rec_size = rec;
    p2.func_info = reinterpret_cast<uint64_t>(finfo.data());
    p2.nr_jited_func_lens = nj;
    p2.jited_func_lens = reinterpret_cast<uint64_t>(jlens.data());
    if (bpf_obj_get_info_by_fd(fd, &p2, &len2) == 0) {
      for (uint32_t i = 0; i < n; i++) {
        auto* f = reinterpret_cast<bpf_func_info*>(finfo.data() + size_t(i) * rec);
        uint32_t end = i + 1 < n ? reinterpret_cast<bpf_func_info*>(finfo.data() + size_t(i + 1) * rec)->insn_off
                                 : pi.xlated_prog_len / 8;
        Napi::Object fo = Napi::Object::New(env);
        fo.Set("xlatedBytes", (end - f->insn_off) * 8);
        fo.Set("jitedBytes", i < nj ? jlens[i] : 0);
        funcs.Set(i, fo);
      }
    }
  }
  o.Set("funcs", funcs);
  return o;
}

Napi::Value ProgInfo(const Napi::CallbackInfo& info) { return ProgInfoObject(info.Env(), ArgFd(info)); }

// progInfoById(id) -> info | null (null when the program is gone)
Napi::Value ProgInfoById(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t id = ArgU32(info, 0, "program id");
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) {
    if (errno == ENOENT) return env.Null();
    ThrowErrno(env, errno, "open program id " + std::to_string(id));
  }
  try {
    Napi::Object o = ProgInfoObject(env, fd);
    close(fd);
    return o;
  } catch (...) {
    close(fd);
    throw;
  }
}

Napi::Value IfNameToIndex(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name = ArgString(info, 0, "interface name");
  unsigned idx = if_nametoindex(name.c_str());
  if (!idx) ThrowErrno(env, errno, "interface '" + name + "'");
  return Napi::Number::New(env, idx);
}

// linkCreate(progFd, ifindex, attachType, flags) -> link fd
Napi::Value LinkCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int prog = ArgFd(info, 0);
  int ifindex = ArgInt(info, 1, "ifindex");
  int type = ArgInt(info, 2, "attach type");
  uint32_t flags = info.Length() > 3 && info[3].IsNumber() ? info[3].As<Napi::Number>().Uint32Value() : 0;
  LIBBPF_OPTS(bpf_link_create_opts, opts, .flags = flags);
  int fd = bpf_link_create(prog, ifindex, (enum bpf_attach_type)type, &opts);
  if (fd < 0) ThrowErrno(env, errno, "link create");
  return Napi::Number::New(env, fd);
}

// linkUpdate(linkFd, newProgFd, expectedOldProgFd?) — atomic program replacement behind a link. With the third
// argument the kernel swaps only if the link still runs that program (BPF_F_REPLACE), else fails with EPERM: a
// compare-and-swap, so a program someone else put there in the meantime is never replaced unseen.
Napi::Value LinkUpdate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int link = ArgFd(info, 0);
  int prog = ArgFd(info, 1);
  LIBBPF_OPTS(bpf_link_update_opts, opts);
  if (info.Length() > 2 && info[2].IsNumber()) {
    opts.flags = BPF_F_REPLACE;
    opts.old_prog_fd = ArgFd(info, 2);
  }
  if (bpf_link_update(link, prog, &opts)) ThrowErrno(env, errno, "link update");
  return env.Undefined();
}

// progGetFdById(id) -> fd of a loaded program (to name it as the expected old program of linkUpdate).
Napi::Value ProgGetFdById(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int id = ArgInt(info, 0, "program id");
  int fd = bpf_prog_get_fd_by_id(id);
  if (fd < 0) ThrowErrno(env, errno, "program id " + std::to_string(id));
  return Napi::Number::New(env, fd);
}

Napi::Value LinkDetach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int link = ArgFd(info, 0);
  if (bpf_link_detach(link)) ThrowErrno(env, errno, "link detach");
  return env.Undefined();
}

// linkInfo(fd) -> { id, type, progId, ifindex }  (ifindex for XDP and TCX links)
Napi::Value LinkInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = ArgFd(info);
  // Info structs of maps/programs would be misread as link info: check the fd's kind first.
  char target[64] = {0};
  std::string self = "/proc/self/fd/" + std::to_string(fd);
  ssize_t n = readlink(self.c_str(), target, sizeof target - 1);
  if (n < 0) ThrowErrno(env, errno, "link info");
  // The kernel names the inode "bpf_link" for new links and "bpf-link" for fds from BPF_OBJ_GET.
  if (std::string(target) != "anon_inode:bpf_link" && std::string(target) != "anon_inode:bpf-link")
    ThrowErrno(env, EINVAL, std::string("link info: fd is ") + target + ", not a BPF link");
  bpf_link_info li = {};
  uint32_t len = sizeof li;
  if (bpf_obj_get_info_by_fd(fd, &li, &len)) ThrowErrno(env, errno, "link info");
  Napi::Object o = Napi::Object::New(env);
  o.Set("id", li.id);
  o.Set("type", li.type);
  o.Set("progId", li.prog_id);
  // XDP and TCX link info both start with the ifindex (TCX: { ifindex, attach_type }).
  o.Set("ifindex", li.xdp.ifindex);
  const uint32_t* raw = &li.xdp.ifindex;
  o.Set("attachType", raw[1]);
  return o;
}

// xdpQuery(ifindex) -> { progId, drvProgId, skbProgId, hwProgId, attachMode }
Napi::Value XdpQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int ifindex = ArgInt(info, 0, "ifindex");
  LIBBPF_OPTS(bpf_xdp_query_opts, opts);
  int r = bpf_xdp_query(ifindex, 0, &opts);
  if (r) ThrowErrno(env, r, "XDP query on ifindex " + std::to_string(ifindex));
  Napi::Object o = Napi::Object::New(env);
  o.Set("progId", opts.prog_id);
  o.Set("drvProgId", opts.drv_prog_id);
  o.Set("skbProgId", opts.skb_prog_id);
  o.Set("hwProgId", opts.hw_prog_id);
  o.Set("attachMode", opts.attach_mode);
  return o;
}

// progQuery(ifindex, attachType) -> [progId...]  (TCX ingress/egress)
Napi::Value ProgQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int ifindex = ArgInt(info, 0, "ifindex");
  int type = ArgInt(info, 1, "attach type");
  std::vector<uint32_t> ids(64);
  LIBBPF_OPTS(bpf_prog_query_opts, opts);
  opts.prog_ids = ids.data();
  opts.prog_cnt = ids.size();
  if (bpf_prog_query_opts(ifindex, (enum bpf_attach_type)type, &opts)) ThrowErrno(env, errno, "program query");
  Napi::Array a = Napi::Array::New(env, opts.prog_cnt);
  for (uint32_t i = 0; i < opts.prog_cnt && i < ids.size(); i++) a.Set(i, ids[i]);
  return a;
}

// Legacy TC (clsact qdisc + direct-action cls_bpf filter), for kernels without tcx.
bpf_tc_hook ClsactHook(const Napi::CallbackInfo& info, size_t i) {
  bpf_tc_hook hook = {};
  hook.sz = sizeof hook;
  hook.ifindex = ArgInt(info, i, "ifindex");
  hook.attach_point = info[i + 1].ToBoolean() ? BPF_TC_INGRESS : BPF_TC_EGRESS;
  return hook;
}

// tcClsactAttach(progFd, ifindex, ingress, handle, priority, replace) -> progId
Napi::Value TcClsactAttach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int prog = ArgFd(info, 0);
  bpf_tc_hook hook = ClsactHook(info, 1);
  int r = bpf_tc_hook_create(&hook);  // creates the clsact qdisc
  if (r && r != -EEXIST) ThrowErrno(env, r, "create clsact qdisc");
  LIBBPF_OPTS(bpf_tc_opts, opts, .prog_fd = prog, .handle = ArgU32(info, 3, "handle"),
              .priority = ArgU32(info, 4, "priority"));
  if (info.Length() > 5 && info[5].ToBoolean()) opts.flags = BPF_TC_F_REPLACE;
  r = bpf_tc_attach(&hook, &opts);
  if (r) ThrowErrno(env, r, "attach clsact filter");
  return Napi::Number::New(env, opts.prog_id);
}

// tcClsactQuery(ifindex, ingress, handle, priority) -> progId | null
Napi::Value TcClsactQuery(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bpf_tc_hook hook = ClsactHook(info, 0);
  LIBBPF_OPTS(bpf_tc_opts, opts, .handle = ArgU32(info, 2, "handle"), .priority = ArgU32(info, 3, "priority"));
  int r = bpf_tc_query(&hook, &opts);
  if (r == -ENOENT || r == -EINVAL) return env.Null();  // EINVAL: no clsact qdisc on the device
  if (r) ThrowErrno(env, r, "query clsact filter");
  return Napi::Number::New(env, opts.prog_id);
}

// tcClsactDetach(ifindex, ingress, handle, priority)
Napi::Value TcClsactDetach(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bpf_tc_hook hook = ClsactHook(info, 0);
  LIBBPF_OPTS(bpf_tc_opts, opts, .handle = ArgU32(info, 2, "handle"), .priority = ArgU32(info, 3, "priority"));
  int r = bpf_tc_detach(&hook, &opts);
  if (r) ThrowErrno(env, r, "detach clsact filter");
  return env.Undefined();
}

}  // namespace

void InitProgs(Napi::Env env, Napi::Object exports) {
  ExportAll(env, exports, {
    {"progTestRun", ProgTestRun},
    {"progInfo", ProgInfo},
    {"progInfoById", ProgInfoById},
    {"ifNameToIndex", IfNameToIndex},
    {"linkCreate", LinkCreate},
    {"linkUpdate", LinkUpdate},
    {"progGetFdById", ProgGetFdById},
    {"linkDetach", LinkDetach},
    {"linkInfo", LinkInfo},
    {"xdpQuery", XdpQuery},
    {"progQuery", ProgQuery},
    {"tcClsactAttach", TcClsactAttach},
    {"tcClsactQuery", TcClsactQuery},
    {"tcClsactDetach", TcClsactDetach},
  });
  exports.Set("attachTcxIngress", Napi::Number::New(env, kAttachTcxIngress));
  exports.Set("attachTcxEgress", Napi::Number::New(env, kAttachTcxEgress));
  exports.Set("attachXdp", Napi::Number::New(env, BPF_XDP));
}

}  // namespace gitlb
