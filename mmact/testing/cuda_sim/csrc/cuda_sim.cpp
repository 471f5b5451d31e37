// The CPU simulation's runtime (cuda_sim.h): blocks run one after another,
// each block's threads as fibers on the calling thread that switch only at
// __syncthreads; the settings tests choose (the multiprocessors, the order
// seed) and the launches' grid sizes, as operators of mmact_cuda_sim; the
// Python module.
#include <Python.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include "cuda_sim.h"
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace mmact_sim {

thread_local Dim3 thread_idx, block_idx;

namespace {

std::atomic<int> sms{132};
std::atomic<int64_t> seed{1};
std::mutex log_mutex;
std::vector<int64_t> grids;  // the launches' block counts since configure
std::atomic<int64_t> launches{0};

// splitmix64: the orders' random numbers.
uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// order[0..n) as 0..n-1, shuffled by key unless the seed is 0 (in order).
template <typename T>
void arrange(std::vector<T>& order, int64_t n, uint64_t key) {
  order.resize(n);
  std::iota(order.begin(), order.end(), T{0});
  if (seed.load() == 0) return;
  for (int64_t i = n - 1; i > 0; --i) {
    key = mix(key);
    std::swap(order[i], order[key % static_cast<uint64_t>(i + 1)]);
  }
}

#if defined(__x86_64__)
// Saves the callee-saved registers on the running stack, stores its stack
// pointer in *from, and resumes the stack saved at `to`. The SSE and x87
// control words are not switched: no kernel changes them. Unlike
// swapcontext, no system call (the signal mask is left alone).
extern "C" void mmact_sim_swap(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .type mmact_sim_swap, @function
mmact_sim_swap:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size mmact_sim_swap, .-mmact_sim_swap
)");

struct Context {
  void* sp = nullptr;
};

void swap_to(Context* from, Context* to) { mmact_sim_swap(&from->sp, to->sp); }

// A fresh context on [base, base + size) that starts in entry(): its first
// resume pops six zeroed registers and returns into entry, which must not
// return (a null return address above it ends backtraces).
void start_context(Context* c, char* base, size_t size, void (*entry)()) {
  auto top = reinterpret_cast<uintptr_t>(base + size) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;
  *--sp = reinterpret_cast<void*>(entry);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;
  c->sp = sp;
}
#else
// Elsewhere glibc's contexts (a system call per switch: slower).
struct Context {
  ucontext_t uc;
};

void swap_to(Context* from, Context* to) { swapcontext(&from->uc, &to->uc); }

void start_context(Context* c, char* base, size_t size, void (*entry)()) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = base;
  c->uc.uc_stack.ss_size = size;
  c->uc.uc_link = nullptr;
  makecontext(&c->uc, entry, 0);
}
#endif

enum class State { kRunning, kWaiting, kDone };

struct Fiber {
  Context context;
  State state;
  const char* file;  // the barrier it waits at
  int line;
  std::exception_ptr error;
};

constexpr size_t kStack = size_t{128} << 10;
constexpr int kMaxThreads = 1024;

// A block being run: its threads, their stacks (each above a guard page,
// so an overflow faults), the scheduler's context.
struct Block {
  std::vector<Fiber> fibers;
  char* stacks = nullptr;
  size_t page = 0;
  int capacity = 0;
  Context scheduler;
  int current = 0;
  void (*thread)(void*) = nullptr;
  void* call = nullptr;

  char* stack(int t) { return stacks + t * (kStack + page) + page; }

  void reserve(int threads) {
    if (threads <= capacity) return;
    if (stacks) munmap(stacks, capacity * (kStack + page));
    page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t bytes = threads * (kStack + page);
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    TORCH_CHECK(m != MAP_FAILED, "mmact_cuda_sim: no memory for ", threads,
                " fiber stacks");
    stacks = static_cast<char*>(m);
    capacity = threads;
    for (int t = 0; t < threads; ++t) {
      mprotect(stack(t) - page, page, PROT_NONE);
    }
  }
};

thread_local Block block;

[[noreturn]] void fiber_main() {
  Fiber& f = block.fibers[block.current];
  try {
    block.thread(block.call);
  } catch (...) {
    f.error = std::current_exception();
  }
  f.state = State::kDone;
  swap_to(&f.context, &block.scheduler);
  __builtin_unreachable();
}

std::string where(const Fiber& f) {
  if (f.state == State::kDone) return "has returned";
  const char* slash = std::strrchr(f.file, '/');
  return "waits at " + std::string(slash ? slash + 1 : f.file) + ":" +
         std::to_string(f.line);
}

// Runs block b: every thread to its next barrier (or its end), in a new
// order each time, until all have returned.
void run_block(int64_t b, int threads, uint64_t key) {
  block_idx = Dim3{static_cast<unsigned int>(b), 0, 0};
  block.fibers.assign(threads, Fiber{});
  for (int t = 0; t < threads; ++t) {
    start_context(&block.fibers[t].context, block.stack(t), kStack,
                  fiber_main);
  }
  std::vector<int> order;
  for (uint64_t phase = 0;; ++phase) {
    arrange(order, threads, mix(key ^ mix(phase)));
    for (int t : order) {
      Fiber& f = block.fibers[t];
      if (f.state == State::kDone) continue;
      f.state = State::kRunning;
      thread_idx = Dim3{static_cast<unsigned int>(t), 0, 0};
      block.current = t;
      swap_to(&block.scheduler, &f.context);
    }
    int done = 0;
    for (const Fiber& f : block.fibers) {
      if (f.error) std::rethrow_exception(f.error);
      done += f.state == State::kDone;
    }
    if (done == threads) return;
    const auto waiting = [](const Fiber& f) {
      return f.state == State::kWaiting;
    };
    const int w = static_cast<int>(
        std::find_if(block.fibers.begin(), block.fibers.end(), waiting) -
        block.fibers.begin());
    const Fiber& first = block.fibers[w];
    for (int t = 0; t < threads; ++t) {
      const Fiber& f = block.fibers[t];
      TORCH_CHECK(waiting(f) && f.line == first.line &&
                      std::strcmp(f.file, first.file) == 0,
                  "mmact_cuda_sim: a divergent __syncthreads in block ", b,
                  ": thread ", w, " ", where(first), ", thread ", t, " ",
                  where(f));
    }
    for (Fiber& f : block.fibers) f.state = State::kRunning;
  }
}

}  // namespace

void sync_threads(const char* file, int line) {
  Fiber& f = block.fibers[block.current];
  f.state = State::kWaiting;
  f.file = file;
  f.line = line;
  swap_to(&f.context, &block.scheduler);
}

void run_grid(int64_t blocks, int threads, void (*thread)(void*),
              void* call) {
  TORCH_CHECK(0 < threads && threads <= kMaxThreads,
              "mmact_cuda_sim: a block of ", threads, " threads");
  TORCH_CHECK(block.thread == nullptr,
              "mmact_cuda_sim: a launch from inside a kernel");
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    grids.push_back(blocks);
  }
  const uint64_t key = mix(static_cast<uint64_t>(seed.load()) ^
                           mix(static_cast<uint64_t>(launches++)));
  std::vector<int64_t> order;
  arrange(order, blocks, key);
  block.reserve(threads);
  block.thread = thread;
  block.call = call;
  try {
    for (int64_t b : order) run_block(b, threads, mix(key ^ b));
  } catch (...) {
    block.thread = nullptr;
    throw;
  }
  block.thread = nullptr;
}

int multiprocessors(c10::DeviceIndex) { return sms.load(); }

namespace {

// configure(multiprocessors, order_seed): the simulated GPU's
// multiprocessors and the seed of the block and thread orders (0: in
// order); clears the launch log and restarts the orders' sequence.
void configure(int64_t multiprocessors, int64_t order_seed) {
  TORCH_CHECK_VALUE(multiprocessors >= 1, "mmact_cuda_sim.configure: ",
                    "multiprocessors=", multiprocessors, " must be >= 1");
  TORCH_CHECK_VALUE(order_seed >= 0, "mmact_cuda_sim.configure: ",
                    "order_seed=", order_seed, " must be >= 0");
  std::lock_guard<std::mutex> lock(log_mutex);
  sms = static_cast<int>(multiprocessors);
  seed = order_seed;
  launches = 0;
  grids.clear();
}

// The block counts of the launches since configure, in order.
std::vector<int64_t> launched() {
  std::lock_guard<std::mutex> lock(log_mutex);
  return grids;
}

// Probes of the simulation itself, for its tests: kernels whose outcome
// shows the orders it runs threads and blocks in, and its barrier checks.

// Each thread's place in its block's order before and after a barrier
// (ranks, (blocks, 2, threads)) and each block's place in the grid's order
// (block_ranks); started: blocks started so far, threads per block.
__global__ void order_kernel(int64_t* ranks, int64_t* counts,
                             int64_t* block_ranks, int64_t* started) {
  const int64_t threads = started[1];
  int64_t* count = counts + 2 * blockIdx.x;
  if (count[0] == 0) block_ranks[blockIdx.x] = started[0]++;
  ranks[(2 * blockIdx.x) * threads + threadIdx.x] = count[0]++;
  __syncthreads();
  ranks[(2 * blockIdx.x + 1) * threads + threadIdx.x] = count[1]++;
}

// Each thread writes its index to shared memory, then (after a barrier
// when `barrier`) reads its left neighbour's: right in any order with the
// barrier; without it, right only for threads that ran after their
// neighbour (in order: all but thread 0).
__global__ void neighbour_kernel(int64_t* out, bool barrier) {
  __shared__ int64_t s[kMaxThreads];
  s[threadIdx.x] = threadIdx.x + 1000 * blockIdx.x;
  if (barrier) __syncthreads();
  out[blockIdx.x * 64 + threadIdx.x] = threadIdx.x ? s[threadIdx.x - 1] : -1;
  __syncthreads();
  s[threadIdx.x] = -2;  // what a later block finds, unless it writes first
}

// Barriers CUDA leaves undefined: odd and even threads at two different
// __syncthreads (variant 0), or thread 3 returned while the others wait
// (variant 1).
__global__ void divergent_kernel(int64_t variant) {
  if (variant == 1 && threadIdx.x == 3) return;
  if (variant == 0 && threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}

// probe_orders(blocks, threads) -> (thread ranks (blocks, 2, threads),
// block ranks (blocks,)).
std::tuple<at::Tensor, at::Tensor> probe_orders(int64_t blocks,
                                                int64_t threads) {
  const auto longs = at::TensorOptions().dtype(at::kLong);
  at::Tensor ranks = at::full({blocks, 2, threads}, -1, longs);
  at::Tensor counts = at::zeros({blocks, 2}, longs);
  at::Tensor block_ranks = at::full({blocks}, -1, longs);
  at::Tensor started = at::tensor({int64_t{0}, threads}, longs);
  launch(order_kernel, blocks, static_cast<int>(threads),
         ranks.data_ptr<int64_t>(), counts.data_ptr<int64_t>(),
         block_ranks.data_ptr<int64_t>(), started.data_ptr<int64_t>());
  return {ranks, block_ranks};
}

// probe_neighbours(blocks, barrier) -> what each of 64 threads read (blocks,
// 64).
at::Tensor probe_neighbours(int64_t blocks, bool barrier) {
  at::Tensor out = at::full({blocks, 64}, -3, at::kLong);
  launch(neighbour_kernel, blocks, 64, out.data_ptr<int64_t>(), barrier);
  return out;
}

void probe_divergence(int64_t variant) {
  launch(divergent_kernel, 2, 8, variant);
}

}  // namespace
}  // namespace mmact_sim

// The simulation's settings; the kernels' operators are defined with
// mmact's schemas by mmact.testing.cuda_sim before it loads this library.
TORCH_LIBRARY_FRAGMENT(mmact_cuda_sim, m) {
  m.def("configure(int multiprocessors, int order_seed) -> ()",
        mmact_sim::configure);
  m.def("launched() -> int[]", mmact_sim::launched);
  m.def("probe_orders(int blocks, int threads) -> (Tensor, Tensor)",
        mmact_sim::probe_orders);
  m.def("probe_neighbours(int blocks, bool barrier) -> Tensor",
        mmact_sim::probe_neighbours);
  m.def("probe_divergence(int variant) -> ()", mmact_sim::probe_divergence);
}

#define MMACT_STR_(x) #x
#define MMACT_STR(x) MMACT_STR_(x)
#define MMACT_CAT_(a, b) a##b
#define MMACT_CAT(a, b) MMACT_CAT_(a, b)

// The Python module the build imports; the operators are torch.ops'.
PyMODINIT_FUNC MMACT_CAT(PyInit_, TORCH_EXTENSION_NAME)() {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT,
                               MMACT_STR(TORCH_EXTENSION_NAME), nullptr, -1,
                               nullptr};
  return PyModule_Create(&module);
}
