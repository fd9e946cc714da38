// Interprocess handles as the runtime API gives them (cudaIpcGetMemHandle,
// cudaIpcOpenMemHandle, cudaIpcGetEventHandle, cudaIpcOpenEventHandle),
// between this program and two copies of itself it starts, as NVIDIA's
// simpleIPC does: the parent allocates a buffer and an interprocess event
// per child and passes their handles on the command line; each child opens
// them, runs a kernel on its half of the parent's buffer, records the
// event and exits; the parent waits for the events and checks the buffer
// against the CPU. Handles that must not be made or opened (a plain
// event's, the parent's own, one of zeros) print how the driver refuses
// them. The
// output is compared line by line with the native run (ipc.expected); the
// last line is PASS.
//
// Built by nvcc like any CUDA program; its kernel is one pvgpu's host test
// double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <unistd.h>
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

static const int N = 1 << 20;
static const int CHILDREN = 2;

static void to_hex(const void *p, size_t n, char *out) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
}

static void from_hex(const char *s, void *p, size_t n) {
    unsigned char *b = (unsigned char *)p;
    for (size_t i = 0; i < n; i++) sscanf(s + 2 * i, "%2hhx", &b[i]);
}

// argv: child INDEX MEMHANDLE EVENTHANDLE
static int child(int index, const char *mem, const char *ev) {
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    from_hex(mem, &mh, sizeof mh);
    from_hex(ev, &eh, sizeof eh);
    float *y;
    cudaEvent_t done;
    CHECK(cudaIpcOpenMemHandle((void **)&y, mh, cudaIpcMemLazyEnablePeerAccess));
    CHECK(cudaIpcOpenEventHandle(&done, eh));
    int half = N / CHILDREN;
    std::vector<float> h(half);
    for (int i = 0; i < half; i++) h[i] = (float)((i + index) % 100);
    float *x;
    CHECK(cudaMalloc(&x, half * sizeof(float)));
    CHECK(cudaMemcpy(x, h.data(), half * sizeof(float), cudaMemcpyHostToDevice));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    saxpy<<<(half + 255) / 256, 256, 0, s>>>(index + 2.0f, x, y + index * half, half);
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(done, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaIpcCloseMemHandle(y));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaFree(x));
    return 0;
}

// argv: open MEMHANDLE (one that must not open): says whether it opened.
static int open_only(const char *mem) {
    cudaIpcMemHandle_t mh;
    from_hex(mem, &mh, sizeof mh);
    void *q = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&q, mh, cudaIpcMemLazyEnablePeerAccess);
    printf("open a handle of zeros in another process: %s\n", e == cudaSuccess ? "cudaSuccess" : "refused");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "child") == 0) return child(atoi(argv[2]), argv[3], argv[4]);
    if (argc == 3 && strcmp(argv[1], "open") == 0) return open_only(argv[2]);
    setvbuf(stdout, NULL, _IONBF, 0);
    bool ok = true;
    int ipcEvents = 0;
    CHECK(cudaDeviceGetAttribute(&ipcEvents, cudaDevAttrIpcEventSupport, 0));
    printf("interprocess events supported: %d\n", ipcEvents);

    float *buf;
    CHECK(cudaMalloc(&buf, N * sizeof(float)));
    CHECK(cudaMemset(buf, 0, N * sizeof(float)));
    cudaIpcMemHandle_t mh, again;
    CHECK(cudaIpcGetMemHandle(&mh, buf));
    CHECK(cudaIpcGetMemHandle(&again, buf));
    printf("one handle per allocation: %s\n", memcmp(&mh, &again, sizeof mh) == 0 ? "yes" : "no");

    cudaEvent_t done[CHILDREN], plain;
    char memhex[2 * sizeof mh + 1], evhex[CHILDREN][2 * sizeof(cudaIpcEventHandle_t) + 1];
    to_hex(&mh, sizeof mh, memhex);
    for (int c = 0; c < CHILDREN; c++) {
        cudaIpcEventHandle_t eh;
        CHECK(cudaEventCreate(&done[c], cudaEventDisableTiming | cudaEventInterprocess));
        CHECK(cudaIpcGetEventHandle(&eh, done[c]));
        to_hex(&eh, sizeof eh, evhex[c]);
    }
    CHECK(cudaEventCreate(&plain));
    cudaIpcEventHandle_t ph;
    printf("handle of a plain event: %s\n", cudaGetErrorName(cudaIpcGetEventHandle(&ph, plain)));
    cudaGetLastError();

    // Children, started as simpleIPC starts them (fork and exec).
    pid_t pids[CHILDREN];
    for (int c = 0; c < CHILDREN; c++) {
        char index[16];
        snprintf(index, sizeof index, "%d", c);
        pids[c] = fork();
        if (pids[c] == 0) {
            execl("/proc/self/exe", argv[0], "child", index, memhex, evhex[c], (char *)NULL);
            _exit(127);
        }
    }
    for (int c = 0; c < CHILDREN; c++) {
        int st = 0;
        waitpid(pids[c], &st, 0);
        ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
        printf("child %d exited with %d\n", c, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    for (int c = 0; c < CHILDREN; c++) CHECK(cudaEventSynchronize(done[c]));

    std::vector<float> got(N);
    CHECK(cudaMemcpy(got.data(), buf, N * sizeof(float), cudaMemcpyDeviceToHost));
    bool same = true;
    int half = N / CHILDREN;
    for (int c = 0; c < CHILDREN; c++)
        for (int i = 0; i < half; i++) same = same && got[c * half + i] == (c + 2.0f) * (float)((i + c) % 100);
    printf("children's kernels wrote the parent's buffer: %s\n", same ? "ok" : "MISMATCH");
    ok = ok && same;

    void *p = NULL;
    printf("open in the exporting process: %s\n", cudaGetErrorName(cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess)));
    cudaGetLastError();
    // A handle of nothing (zeros), in another process.
    cudaIpcMemHandle_t changed;
    memset(&changed, 0, sizeof changed);
    char changedhex[2 * sizeof mh + 1];
    to_hex(&changed, sizeof changed, changedhex);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "open", changedhex, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);

    for (int c = 0; c < CHILDREN; c++) CHECK(cudaEventDestroy(done[c]));
    CHECK(cudaEventDestroy(plain));
    CHECK(cudaFree(buf));
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
