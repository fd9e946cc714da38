// A program replaying CUDA graphs with conditional nodes, for
// tests/migrate/run.sh: a while loop whose body counts down and runs an
// if/else node (one handle made for the graph, one for its body, the
// loop's assigning its default at each launch), and an if/else graph
// whose executable graph had a kernel node changed and whose graph was
// destroyed once instantiated. Each step launches both and prints a
// checksum, so a session that moved shows whether its conditional nodes,
// their handles and bodies, came along.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      printf("FAIL %s line %d: %s\n", #x, __LINE__, cudaGetErrorName(e_));             \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

const int N = 1 << 16;

__global__ void count_down(int *counter, cudaGraphConditionalHandle h) {
  int v = --*counter;
  cudaGraphSetConditional(h, v > 0);
}

// The condition: whether word `at` of `flags` (as the loop's counter
// picks it) is odd.
__global__ void pick(const int *flags, const int *counter, cudaGraphConditionalHandle h) {
  cudaGraphSetConditional(h, flags[*counter & 7] & 1);
}

__global__ void add(int *buf, int a, int b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) buf[i] = buf[i] * a + b + i % 11;
}

static cudaGraphNode_t kernel(cudaGraph_t g, const cudaGraphNode_t *dep, void *f, void **args, int blocks) {
  cudaKernelNodeParams p = {};
  p.func = f;
  p.gridDim = blocks;
  p.blockDim = 256;
  p.kernelParams = args;
  cudaGraphNode_t n;
  CK(cudaGraphAddKernelNode(&n, g, dep, dep ? 1 : 0, &p));
  return n;
}

static cudaGraphNode_t cond(cudaGraph_t g, const cudaGraphNode_t *dep, cudaGraphConditionalHandle h,
                            cudaGraphConditionalNodeType type, int size, cudaGraph_t *bodies) {
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = size;
  cudaGraphNode_t n;
  CK(cudaGraphAddNode(&n, g, dep, NULL, dep ? 1 : 0, &p));
  for (int i = 0; i < size; i++) bodies[i] = p.conditional.phGraph_out[i];
  return n;
}

int main(int argc, char **argv) {
  int steps = argc > 1 ? atoi(argv[1]) : 100;
  int *buf, *counter, *flags;
  CK(cudaMalloc(&buf, N * sizeof(int)));
  CK(cudaMalloc(&counter, sizeof(int)));
  CK(cudaMalloc(&flags, 8 * sizeof(int)));
  CK(cudaMemset(buf, 0, N * sizeof(int)));
  int fl[8] = {1, 2, 3, 5, 8, 13, 21, 34};
  CK(cudaMemcpy(flags, fl, sizeof fl, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  // while (--counter > 0) { if (flags[counter & 7] odd) buf = 3 buf + 1 else buf = 5 buf + 2 }
  cudaGraph_t loop, body[1], sides[2];
  CK(cudaGraphCreate(&loop, 0));
  cudaGraphConditionalHandle w, hb;
  CK(cudaGraphConditionalHandleCreate(&w, loop, 1, cudaGraphCondAssignDefault));
  cond(loop, NULL, w, cudaGraphCondTypeWhile, 1, body);
  CK(cudaGraphConditionalHandleCreate(&hb, body[0], 0, 0));
  void *a1[] = {&counter, &w};
  cudaGraphNode_t k1 = kernel(body[0], NULL, (void *)count_down, a1, 1);
  void *a2[] = {&flags, &counter, &hb};
  cudaGraphNode_t k2 = kernel(body[0], &k1, (void *)pick, a2, 1);
  cond(body[0], &k2, hb, cudaGraphCondTypeIf, 2, sides);
  int three = 3, one = 1, five = 5, two = 2;
  void *a3[] = {&buf, &three, &one}, *a4[] = {&buf, &five, &two};
  kernel(sides[0], NULL, (void *)add, a3, N / 256);
  kernel(sides[1], NULL, (void *)add, a4, N / 256);
  cudaGraphExec_t looping;
  CK(cudaGraphInstantiate(&looping, loop, 0));

  // if (flags[counter & 7] odd) buf = 7 buf + 3 else buf = buf + 4; then
  // changed in the executable graph to read the flags one word on.
  cudaGraph_t g2, s2[2];
  CK(cudaGraphCreate(&g2, 0));
  cudaGraphConditionalHandle h;
  CK(cudaGraphConditionalHandleCreate(&h, g2, 0, 0));
  void *a5[] = {&flags, &counter, &h};
  cudaGraphNode_t picker = kernel(g2, NULL, (void *)pick, a5, 1);
  cond(g2, &picker, h, cudaGraphCondTypeIf, 2, s2);
  int seven = 7, four = 4;
  void *a6[] = {&buf, &seven, &three}, *a7[] = {&buf, &one, &four};
  kernel(s2[0], NULL, (void *)add, a6, N / 256);
  kernel(s2[1], NULL, (void *)add, a7, N / 256);
  cudaGraphExec_t branching;
  CK(cudaGraphInstantiate(&branching, g2, 0));
  int *next = flags + 1;
  void *a8[] = {&next, &counter, &h};
  cudaKernelNodeParams p = {};
  p.func = (void *)pick;
  p.gridDim = 1;
  p.blockDim = 256;
  p.kernelParams = a8;
  CK(cudaGraphExecKernelNodeSetParams(branching, picker, &p));
  CK(cudaGraphDestroy(g2));

  int *out = new int[N];
  for (int s = 0; s < steps; s++) {
    int start = 1 + s % 5;
    CK(cudaMemcpyAsync(counter, &start, sizeof start, cudaMemcpyHostToDevice, st));
    CK(cudaGraphLaunch(looping, st));
    CK(cudaGraphLaunch(branching, st));
    CK(cudaMemcpyAsync(out, buf, N * sizeof(int), cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    long long sum = 0;
    for (int i = 0; i < N; i++) sum += out[i] * (long long)(1 + i % 7);
    printf("%d %d %lld\n", s, start, sum);
    fflush(stdout);
    usleep(50000);
  }
  CK(cudaGraphExecDestroy(looping));
  CK(cudaGraphExecDestroy(branching));
  CK(cudaGraphDestroy(loop));
  printf("done\n");
  return 0;
}
