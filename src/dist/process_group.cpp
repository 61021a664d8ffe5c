// c10d TCPStore + ProcessGroupGloo or ProcessGroupNCCL, DDP gradient
// averaging, the replica check. The only TU that includes c10d
// (docs/distributed.md).
#include "anchor/dist/process_group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
// USE_C10D_NCCL: defined by CMake (ANCHOR_NCCL) when the LibTorch found links
// ProcessGroupNCCL; a ROCm LibTorch's RCCL group has the same name.
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "anchor/common/fs.hpp"
#include "anchor/dist/store.hpp"
#include "compat/torch_compat.hpp"
#include "anchor/error.hpp"
#include "anchor/log.hpp"

namespace anchor::dist {
namespace {

// The common base of the Gloo and NCCL groups: LibTorch 2.0 split the
// collectives out of ProcessGroup into Backend.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

ms to_ms(double s) { return ms(std::max<std::int64_t>(1, static_cast<std::int64_t>(s * 1000.0))); }

std::string key(const std::string& a, int r) { return "anchor/" + a + "/" + std::to_string(r); }

// How often a store key is polled. TCPStore::wait(keys, timeout) is never used
// with a timeout: in LibTorch 1.13 a client whose wait timed out keeps a
// waiter registered on the server, whose later "stop waiting" reply is read as
// the answer to the client's next request, and from then on every answer is
// off by one (a key that is there reads as missing). Later LibTorch cancels the
// waiter; polling check() is correct on both lines. A key that is slow to
// come is polled at most this often; a quick one is seen within a millisecond
// (wait_until backs off from 0.25 ms).
constexpr auto kStorePoll = std::chrono::milliseconds(20);

// Whether `ready()` holds before `deadline`: polled, backing off from 0.25 ms
// to kStorePoll, so a key set a moment later costs a round trip or two, not a
// whole poll interval.
template <typename Ready>
bool wait_until(Ready&& ready, Clock::time_point deadline) {
  auto pause = std::chrono::microseconds(250);
  for (;;) {
    if (ready()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, kStorePoll);
  }
}

// Whether `k` appears in `store` before `deadline`.
bool wait_for_key(c10d::Store& store, const std::string& k, Clock::time_point deadline) {
  return wait_until([&] { return store.check({k}); }, deadline);
}

// A peer that dies while this process writes to it must be an error this
// process can diagnose ("rank 1 did not answer"), not a SIGPIPE that ends it
// with status 141 before it says anything: Gloo's TCP transport writes with
// writev(), which takes no MSG_NOSIGNAL. Python ignores SIGPIPE at start-up,
// which is why torch.distributed never shows this; a C++ rank must do it
// itself, before its first socket. Process-wide; a handler the embedding
// program installed is kept, and the children anchor starts get SIG_DFL back
// (proc::spawn).
void ignore_broken_pipes() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env, double timeout_s) {
  ignore_broken_pipes();
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<std::uint16_t>(env.master_port);
    o.isServer = env.store_server();
    if (o.isServer) o.numWorkers = static_cast<std::size_t>(env.world_size);
    o.waitWorkers = false;  // the Gloo rendezvous waits for every rank, with its own timeout
    o.timeout = to_ms(timeout_s);
    o.multiTenant = true;
    c10::intrusive_ptr<c10d::Store> base = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
    if (env.agent_store) base = c10::make_intrusive<c10d::PrefixStore>(env.store_prefix(), base);
    return base;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": cannot " + (env.store_server() ? "host" : "reach") +
                    " the store at " + where + " within " + std::to_string(timeout_s) + " s: " + compat::message_of(e),
                env.store_server() ? "is MASTER_PORT already in use (a static torchrun rendezvous hosts it: "
                                     "TORCHELASTIC_USE_AGENT_STORE=True)?"
                                   : "is rank 0 running and MASTER_ADDR/MASTER_PORT the same for every rank?");
  }
}

// The file in torchrun's attempt directory where rank 0 publishes its store's port.
const char* const kPublishedStore = "anchor-launch-store";

// One node under torchrun's agent store (LaunchEnv::meets_in_attempt_dir):
// rank 0 hosts a store of this build's LibTorch on a free loopback port and
// publishes the port in the attempt's directory (atomically: written, fsynced,
// renamed); the other ranks, the same binary, wait for it there. Sets
// `published` on rank 0 to the file it wrote.
c10::intrusive_ptr<c10d::Store> meet_in_attempt_dir(const LaunchEnv& env, double timeout_s, std::string& published) {
  ignore_broken_pipes();
  const std::string file = env.attempt_dir + "/" + kPublishedStore;
  c10d::TCPStoreOptions o;
  o.waitWorkers = false;
  o.timeout = to_ms(timeout_s);
  try {
    if (env.rank == 0) {
      o.isServer = true;
      o.port = 0;  // the kernel picks a free one
      o.numWorkers = static_cast<std::size_t>(env.world_size);
      auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
      fs::atomic_write_file(file, std::to_string(store->getPort()) + "\n");
      published = file;
      return store;
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": cannot host a store: " + compat::message_of(e));
  }
  const auto deadline = Clock::now() + to_ms(timeout_s);
  std::error_code ec;
  if (!wait_until([&] { return std::filesystem::exists(file, ec); }, deadline))
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": rank 0 did not publish its store in " + file + " within " +
                    std::to_string(static_cast<int>(timeout_s)) + " s",
                "look at rank 0's output: it may have failed before it started the pilot");
  int port = 0;
  const auto size = std::filesystem::file_size(file, ec);
  const std::string text = !ec && size <= 64 ? fs::read_file(file) : std::string();
  try {
    std::size_t used = 0;
    port = std::stoi(text, &used);
    if (used == 0 || port < 1 || port > 65535) port = 0;
  } catch (const std::exception&) {
    port = 0;
  }
  if (port == 0)
    throw Error(ErrorKind::kRuntime, "rendezvous: " + env.describe() + ": " + file + " holds no port",
                "it is anchor's; was it written by something else?");
  try {
    o.port = static_cast<std::uint16_t>(port);
    return c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": cannot reach rank 0's store on 127.0.0.1:" + std::to_string(port) +
                    " within " + std::to_string(static_cast<int>(timeout_s)) + " s: " + compat::message_of(e),
                "look at rank 0's output");
  }
}

// Refuses the agent's store when the agent runs a torch whose store protocol
// this build's LibTorch does not speak: a 1.x client and a 2.x store (or the
// reverse) hang or drop the connection instead of failing.
void check_agent_store(const LaunchEnv& env) {
  if (!env.agent_store) return;
  const auto theirs = torch_version_of_process(static_cast<int>(::getppid()));
  if (!theirs) return;  // the parent is not the agent, or has no torch package mapped: as before
  const std::string why = store_protocol_mismatch(TORCH_VERSION, *theirs);
  if (why.empty()) return;
  throw Error(ErrorKind::kConfig,
              std::string("anchor pilot under torchrun (") + env.describe() + "): its ranks meet through the " +
                  "torchrun agent's store, and " + why,
              "launch with the torchrun of torch " + std::string(TORCH_VERSION).substr(0, 1) +
                  ".x (the one whose LibTorch this anchor was built with), or use the anchor built with torch " +
                  theirs->substr(0, theirs->find('+')) +
                  "; on one node either torchrun works (the ranks meet without the agent's store)");
}

}  // namespace

struct Store::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  std::string published;  // rank 0's port file in the attempt directory, removed with the store
};

Store::Store(const LaunchEnv& env, double timeout_s) : impl_(std::make_unique<Impl>()) {
  c10::intrusive_ptr<c10d::Store> base;
  if (env.meets_in_attempt_dir()) {
    base = meet_in_attempt_dir(env, timeout_s, impl_->published);
  } else {
    check_agent_store(env);
    base = connect_store(env, timeout_s);
  }
  impl_->store = c10::make_intrusive<c10d::PrefixStore>("anchor-launch", base);
  if (!env.agent_store && !env.meets_in_attempt_dir()) check_launch(env, timeout_s);
}

// Rank 0 writes which launch its store serves; the others check it before
// they read anything from it. A port derived from the Slurm job id (or a
// MASTER_PORT given to two jobs) can lead the ranks of one job to the store of
// another on the same node, whose verdict they would otherwise take as theirs.
void Store::check_launch(const LaunchEnv& env, double timeout_s) {
  const std::string key = "launch";
  const std::string where = env.master_addr + ":" + std::to_string(env.master_port);
  if (env.store_server()) return set(key, env.launch_id);
  if (env.launch_id.empty()) return;
  std::string theirs;
  try {
    if (!wait_for_key(*impl_->store, key, Clock::now() + to_ms(timeout_s)))
      throw Error(ErrorKind::kRuntime,
                  "rendezvous: " + env.describe() + ": the store at " + where + " did not say which launch it serves " +
                      "within " + std::to_string(static_cast<int>(timeout_s)) + " s: it is not this pilot's rank 0's",
                  "give this job a MASTER_PORT of its own");
    const auto v = impl_->store->get(key);
    theirs.assign(v.begin(), v.end());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": cannot read the store at " + where + ": " + compat::message_of(e));
  }
  if (theirs != env.launch_id)
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": the store at " + where + " serves another launch (" +
                    (theirs.empty() ? std::string("one that does not name itself") : theirs) + "), not this one (" +
                    env.launch_id + ")",
                "two launches on this node use the same port: give this job a MASTER_PORT of its own");
}
Store::~Store() {
  std::error_code ec;
  if (!impl_->published.empty()) std::filesystem::remove(impl_->published, ec);
}

void Store::set(const std::string& k, const std::string& v) {
  try {
    impl_->store->set(k, std::vector<std::uint8_t>(v.begin(), v.end()));
    // TCPStore's set sends and returns without an answer; a check on the same
    // connection is answered only after the server applied the set, so every
    // client sees the value once set returns (a racing try_get saw nothing).
    impl_->store->check({k});
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, "store: cannot set '" + k + "': " + compat::message_of(e));
  }
}

std::string Store::wait_get(const std::string& k, const std::string& who_hosts) {
  for (;;) {
    bool there = false;
    try {
      there = impl_->store->check({k});
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kRuntime,
                  "store: " + who_hosts + " is gone (waiting for '" + k + "'): " + compat::message_of(e),
                  "look at that process's output");
    }
    if (there) {
      auto v = impl_->store->get(k);
      return std::string(v.begin(), v.end());
    }
    // Polled, never store->wait(k, timeout): see kStorePoll.
    std::this_thread::sleep_for(kStorePoll);
  }
}

std::optional<std::string> Store::try_get(const std::string& k, const std::string& who_hosts) {
  try {
    if (!impl_->store->check({k})) return std::nullopt;
    auto v = impl_->store->get(k);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, "store: " + who_hosts + " is gone (reading '" + k + "'): " + compat::message_of(e),
                "look at that process's output");
  }
}

long long Store::add(const std::string& k, long long delta) {
  try {
    return static_cast<long long>(impl_->store->add(k, delta));
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime, "store: cannot add to '" + k + "': " + compat::message_of(e));
  }
}

struct ProcessGroup::Impl {
  LaunchEnv env;
  double timeout_s = 300;
  std::string backend;
  c10::intrusive_ptr<c10d::Store> store;  // anchor's keys
  c10::intrusive_ptr<CollectiveBackend> group;
};

bool nccl_available() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

namespace {

c10::intrusive_ptr<CollectiveBackend> make_gloo(const LaunchEnv& env, double timeout_s,
                                                const c10::intrusive_ptr<c10d::Store>& base) {
  auto opts = c10d::ProcessGroupGloo::Options::create(to_ms(timeout_s));
  // One node: loopback. Several: GLOO_SOCKET_IFNAME's interface (as in
  // PyTorch), else the interface the host name resolves to (loopback when it
  // resolves to none).
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (env.local_world_size == env.world_size)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else if (ifname && *ifname)
    opts->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForInterface(std::string(ifname).substr(0, std::string(ifname).find(','))));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", base), env.rank,
                                                     env.world_size, opts);
}

#ifdef USE_C10D_NCCL
c10::intrusive_ptr<CollectiveBackend> make_nccl(const LaunchEnv& env, double timeout_s,
                                                const c10::intrusive_ptr<c10d::Store>& base) {
  // Blocking wait: work->wait() returns when the GPU finished the collective
  // and throws after the timeout, so a dead or hung rank ends this one as it
  // does under Gloo. 1.13 reads NCCL_BLOCKING_WAIT, 2.2+ TORCH_NCCL_BLOCKING_WAIT.
  // A value the user set is kept.
  ::setenv("NCCL_BLOCKING_WAIT", "1", 0);
  ::setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = to_ms(timeout_s);
  // Communicators are created at the first collective, on the tensors' device
  // (cuda:<LOCAL_RANK>, rank_device in launch.hpp).
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>("nccl", base), env.rank,
                                                     env.world_size, opts);
}
#endif

}  // namespace

ProcessGroup::ProcessGroup(const LaunchEnv& env, double timeout_s, const std::string& backend)
    : impl_(std::make_unique<Impl>()) {
  impl_->env = env;
  impl_->timeout_s = timeout_s;
  impl_->backend = backend;
  if (backend != "gloo" && !(backend == "nccl" && nccl_available()))
    throw Error(ErrorKind::kConfig,
                "distributed: backend '" + backend + "' is not available in this build (LibTorch " + TORCH_VERSION +
                    "; gloo" + (nccl_available() ? ", nccl" : "") + ")",
                "use distributed.backend: auto or gloo");
  const auto t0 = Clock::now();
  c10::intrusive_ptr<c10d::Store> base = connect_store(env, timeout_s);
  impl_->store = base;
  try {
#ifdef USE_C10D_NCCL
    if (backend == "nccl") impl_->group = make_nccl(env, timeout_s, base);
#endif
    if (!impl_->group) impl_->group = make_gloo(env, timeout_s, base);
  } catch (const std::exception& e) {
    throw Error(ErrorKind::kRuntime,
                "rendezvous: " + env.describe() + ": the " + std::to_string(env.world_size) +
                    " ranks did not all join within " + std::to_string(timeout_s) + " s: " + compat::message_of(e),
                "check that every rank was started with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  }
  ANCHOR_LOG_INFO("dist", "process group up: {}, {} ({:.3f} s)", env.describe(), backend,
                  std::chrono::duration<double>(Clock::now() - t0).count());
}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->env.rank; }
int ProcessGroup::size() const { return impl_->env.world_size; }
double ProcessGroup::timeout_s() const { return impl_->timeout_s; }
const std::string& ProcessGroup::backend() const { return impl_->backend; }

void ProcessGroup::fail(const std::string& what, const std::string& cause) {
  const int me = rank();
  std::string diagnosis;
  // Tell the others this rank saw the failure, then give the live ones a short
  // grace to say the same: whoever stays silent is the dead or hung rank.
  try {
    impl_->store->set(key("failed", me), std::vector<std::uint8_t>(what.begin(), what.end()));
    const auto grace = to_ms(std::min(impl_->timeout_s, 5.0));
    const auto deadline = Clock::now() + grace;
    std::vector<int> silent, reported;
    for (int r = 0; r < size(); ++r) {
      if (r == me) continue;
      (wait_for_key(*impl_->store, key("failed", r), deadline) ? reported : silent).push_back(r);
    }
    auto list = [](const std::vector<int>& v) {
      std::string s;
      for (int r : v) s += (s.empty() ? "" : ", ") + std::to_string(r);
      return s;
    };
    if (!silent.empty())
      diagnosis =
          std::string(silent.size() == 1 ? "rank " : "ranks ") + list(silent) + " did not answer (dead or hung)";
    else
      diagnosis = "every other rank (" + list(reported) + ") reported the failure too";
  } catch (const std::exception&) {
    diagnosis = impl_->env.agent_store ? "the torchrun agent's store is unreachable"
                                       : "rank 0 (the store's host) did not answer (dead or hung)";
  }
  throw Error(ErrorKind::kRuntime,
              "distributed: " + what + " failed on rank " + std::to_string(me) + "/" + std::to_string(size()) + ": " +
                  diagnosis + " (timeout " + std::to_string(static_cast<int>(impl_->timeout_s)) + " s): " + cause,
              "look at that rank's log; every rank stops rather than hang");
}

void ProcessGroup::allreduce_sum(torch::Tensor& t, const std::string& what) {
  try {
    std::vector<at::Tensor> v{t};
    auto work = impl_->group->allreduce(v);
    work->wait(to_ms(impl_->timeout_s));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(what, compat::message_of(e));
  }
}

void ProcessGroup::reduce_sum(torch::Tensor& t, int root, const std::string& what) {
  try {
    std::vector<at::Tensor> v{t};
    c10d::ReduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.rootRank = root;
    o.timeout = to_ms(impl_->timeout_s);
    auto work = impl_->group->reduce(v, o);
    work->wait(to_ms(impl_->timeout_s));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(what, compat::message_of(e));
  }
}

void ProcessGroup::broadcast(torch::Tensor& t, int root, const std::string& what) {
  try {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = to_ms(impl_->timeout_s);
    auto work = impl_->group->broadcast(v, o);
    work->wait(to_ms(impl_->timeout_s));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(what, compat::message_of(e));
  }
}

void ProcessGroup::barrier(const std::string& what) {
  try {
    c10d::BarrierOptions o;
    o.timeout = to_ms(impl_->timeout_s);
    // NCCL runs the barrier on a device: this rank's (rank_device).
    if (impl_->backend == "nccl") o.device_ids = {impl_->env.local_rank};
    auto work = impl_->group->barrier(o);
    work->wait(to_ms(impl_->timeout_s));
  } catch (const std::exception& e) {
    fail(what, compat::message_of(e));
  }
}

std::vector<std::string> ProcessGroup::exchange(const std::string& k, const std::string& mine) {
  std::vector<std::string> out(static_cast<std::size_t>(size()));
  int r = 0;
  try {
    impl_->store->set(key("x/" + k, rank()), std::vector<std::uint8_t>(mine.begin(), mine.end()));
    const auto deadline = Clock::now() + to_ms(impl_->timeout_s);
    for (r = 0; r < size(); ++r) {
      // Polled up to the timeout, then read: a get() that timed out would
      // leave the client's socket out of step (kStorePoll).
      if (!wait_for_key(*impl_->store, key("x/" + k, r), deadline))
        throw std::runtime_error("no answer within the timeout");
      auto v = impl_->store->get(key("x/" + k, r));
      out[static_cast<std::size_t>(r)].assign(v.begin(), v.end());
    }
  } catch (const std::exception& e) {
    fail("exchange of '" + k + "' (waiting for rank " + std::to_string(r) + ")", compat::message_of(e));
  }
  // The store's host stays until every rank has read every value: the caller
  // may act on them at once (a replica mismatch ends the process), and a rank
  // still reading would then find the store gone and blame the host.
  try {
    const std::string read = "anchor/x/" + k + "/read";
    const auto readers = impl_->store->add(read, 1);
    if (impl_->env.store_server() && readers < size() &&
        !wait_until([&] { return impl_->store->add(read, 0) >= size(); }, Clock::now() + to_ms(impl_->timeout_s)))
      throw std::runtime_error("not every rank read the values within the timeout");
  } catch (const std::exception& e) {
    fail("exchange of '" + k + "' (waiting for every rank to read)", compat::message_of(e));
  }
  return out;
}

GradSyncStats allreduce_gradients(ProcessGroup& pg, const std::vector<torch::Tensor>& params, std::int64_t bucket_bytes,
                                  std::int64_t step) {
  GradSyncStats st;
  const auto t0 = Clock::now();
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const auto& p : params) {
    // A parameter no loss reached has no gradient: zeros, so every rank's buckets line up.
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  const double inv = 1.0 / pg.size();
  std::size_t i = 0;
  while (i < grads.size()) {
    std::size_t j = i;
    std::int64_t bytes = 0;
    while (j < grads.size() && grads[j].scalar_type() == grads[i].scalar_type() &&
           grads[j].device() == grads[i].device() &&
           (j == i || bytes + static_cast<std::int64_t>(grads[j].nbytes()) <= bucket_bytes)) {
      bytes += static_cast<std::int64_t>(grads[j].nbytes());
      ++j;
    }
    std::vector<torch::Tensor> flat;
    for (std::size_t k = i; k < j; ++k) flat.push_back(grads[k].reshape({-1}));
    auto bucket = torch::cat(flat);
    pg.allreduce_sum(
        bucket, "gradient all-reduce (bucket " + std::to_string(st.buckets) + ", step " + std::to_string(step) + ")");
    bucket.mul_(inv);
    std::int64_t off = 0;
    for (std::size_t k = i; k < j; ++k) {
      const auto n = grads[k].numel();
      grads[k].copy_(bucket.narrow(0, off, n).view_as(grads[k]));
      off += n;
    }
    st.bytes += bytes;
    ++st.buckets;
    i = j;
  }
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

std::vector<AllReduceTiming> time_allreduce(ProcessGroup& pg, const std::vector<std::int64_t>& sizes,
                                            const std::string& device, int warmup, int iters) {
  const bool gpu = device.rfind("cuda", 0) == 0;
  iters = std::max(1, iters);
  std::vector<AllReduceTiming> out;
  for (const std::int64_t bytes : sizes) {
    auto t = torch::ones({std::max<std::int64_t>(1, bytes / 4)}, torch::dtype(torch::kFloat32).device(device));
    const std::string what = "all-reduce probe (" + std::to_string(bytes) + " bytes)";
    std::vector<double> times;
    for (int i = 0; i < warmup + iters; ++i) {
      pg.barrier(what);
      if (gpu) torch::cuda::synchronize(t.device().index());
      const auto t0 = Clock::now();
      pg.allreduce_sum(t, what);
      if (gpu) torch::cuda::synchronize(t.device().index());
      if (i >= warmup) times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      t.fill_(1.0f);  // sums of sums would overflow to inf, which some reductions take a slower path for
    }
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    out.push_back({t.numel() * 4, times[times.size() / 2]});
  }
  return out;
}

void check_replicated(ProcessGroup& pg, const std::string& digest, std::int64_t step, const char* point) {
  auto all = pg.exchange(std::string("params/") + point + "/" + std::to_string(step), digest);
  std::string differ;
  for (int r = 1; r < pg.size(); ++r)
    if (all[static_cast<std::size_t>(r)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw Error(ErrorKind::kVerification,
                "DDP: after step " + std::to_string(step) + " the parameters of rank(s) " + differ +
                    " differ from rank 0's (digest " + all[0].substr(0, 12) + ")",
                "the replicas diverged: a collective, the data sharding or the initialisation is not the same "
                "on every rank");
}

}  // namespace anchor::dist
