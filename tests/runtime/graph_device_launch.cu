// Graphs launched from the device, as the CUDA Programming Guide shows
// them: a graph instantiated with cudaGraphInstantiateFlagDeviceLaunch and
// uploaded, launched by a kernel of another graph (cudaGraphLaunch in
// device code) as a tail launch and fire and forget. The kernel receives
// the executable graph's handle as an argument, so the handle the program
// holds must be the one the device knows. Every result is checked against
// the CPU; the output is compared line by line with the native run
// (graph_device_launch.expected); the last line is PASS.
//
// Built by nvcc with relocatable device code and the device runtime
// (-rdc=true -lcudadevrt); its kernels are ones pvgpu's host test double
// implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL: %s at line %d: %s\n", #x, __LINE__,                  \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

extern "C" __global__ void saxpy(float a, const float *x, float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// Launches `g` from the device and writes what cudaGraphLaunch answered.
extern "C" __global__ void pvgpu_graph_launch(cudaGraphExec_t g, int fire_and_forget, int *status) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
        *status = (int)cudaGraphLaunch(g, fire_and_forget ? cudaStreamGraphFireAndForget : cudaStreamGraphTailLaunch);
}

static const int N = 1 << 12;
static bool all_ok = true;

static void verdict(const char *what, bool ok) {
    all_ok = all_ok && ok;
    printf("%-48s %s\n", what, ok ? "ok" : "MISMATCH");
}

// y (on the device) is `times` x 2x.
static void check_y(const char *what, const float *y_d, const std::vector<float> &x, int times) {
    std::vector<float> y(N);
    CHECK(cudaMemcpy(y.data(), y_d, N * sizeof(float), cudaMemcpyDeviceToHost));
    bool ok = true;
    for (int i = 0; i < N; i++) ok = ok && y[i] == 2.0f * times * x[i];
    verdict(what, ok);
}

// A graph of one kernel launching `dev` from the device.
static cudaGraphExec_t launcher(cudaStream_t s, cudaGraphExec_t dev, int fire_and_forget, int *status) {
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    pvgpu_graph_launch<<<1, 1, 0, s>>>(dev, fire_and_forget, status);
    CHECK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    CHECK(cudaGraphInstantiate(&e, g, 0));
    CHECK(cudaGraphDestroy(g));
    return e;
}

int main() {
    std::vector<float> x(N);
    for (int i = 0; i < N; i++) x[i] = (float)(i % 91);
    float *x_d, *y_d;
    int *status;
    CHECK(cudaMalloc(&x_d, N * sizeof(float)));
    CHECK(cudaMalloc(&y_d, N * sizeof(float)));
    CHECK(cudaMalloc(&status, 2 * sizeof(int)));
    CHECK(cudaMemcpy(x_d, x.data(), N * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(y_d, 0, N * sizeof(float)));
    CHECK(cudaMemset(status, 0xff, 2 * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // The device graph: y = 2x + y.
    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    float a = 2.0f;
    int n = N;
    void *args[] = {&a, &x_d, &y_d, &n};
    cudaKernelNodeParams kp = {};
    kp.func = (void *)saxpy;
    kp.gridDim = dim3(N / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    cudaGraphNode_t k;
    CHECK(cudaGraphAddKernelNode(&k, g, nullptr, 0, &kp));
    cudaGraphExec_t dev;
    CHECK(cudaGraphInstantiate(&dev, g, cudaGraphInstantiateFlagDeviceLaunch));
    unsigned long long flags = 0;
    CHECK(cudaGraphExecGetFlags(dev, &flags));
    printf("device graph flags: device launch %s\n", flags & cudaGraphInstantiateFlagDeviceLaunch ? "yes" : "NO");
    CHECK(cudaGraphUpload(dev, s));

    // A tail launch, from a kernel of a graph: y = 2x.
    cudaGraphExec_t tail = launcher(s, dev, 0, &status[0]);
    CHECK(cudaGraphLaunch(tail, s));
    CHECK(cudaStreamSynchronize(s));
    check_y("tail launch from the device", y_d, x, 1);
    // Fire and forget, twice: y = 6x.
    cudaGraphExec_t fire = launcher(s, dev, 1, &status[1]);
    CHECK(cudaGraphLaunch(fire, s));
    CHECK(cudaGraphLaunch(fire, s));
    CHECK(cudaStreamSynchronize(s));
    check_y("fire-and-forget launches from the device", y_d, x, 3);
    int st[2];
    CHECK(cudaMemcpy(st, status, sizeof st, cudaMemcpyDeviceToHost));
    printf("cudaGraphLaunch in device code answered %d and %d\n", st[0], st[1]);
    // Launched from the host too, it runs as any graph: y = 8x.
    CHECK(cudaGraphLaunch(dev, s));
    CHECK(cudaStreamSynchronize(s));
    check_y("the device graph launched from the host", y_d, x, 4);

    for (cudaGraphExec_t e : {tail, fire, dev}) CHECK(cudaGraphExecDestroy(e));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaFree(x_d));
    CHECK(cudaFree(y_d));
    CHECK(cudaFree(status));
    CHECK(cudaStreamDestroy(s));
    printf("%s\n", all_ok ? "PASS" : "FAIL");
    return all_ok ? 0 : 1;
}
