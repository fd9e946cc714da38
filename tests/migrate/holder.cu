// A program holding GIB GiB of device memory that makes no call while its
// state is checkpointed and restored (tests/migrate/sizes.sh): it fills the
// memory (a byte value per MiB), prints a digest of it and READY, waits
// (without a CUDA call) until the file GO exists, then reads the memory
// back, digests it again and says whether it is the same. No kernel of its
// own, so that the host test double runs it too.
//
//   holder GIB GO
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#define CHECK(x)                                                                        \
    do {                                                                                \
        cudaError_t e = (x);                                                            \
        if (e != cudaSuccess) {                                                         \
            printf("FAILED %s: %s\n", #x, cudaGetErrorString(e));                       \
            return 2;                                                                   \
        }                                                                               \
    } while (0)

static const size_t MIB = 1 << 20;

// A byte value per MiB of the memory: a pattern any executor reproduces
// (cudaMemset), different from one MiB to the next.
static int fill(unsigned char *p, size_t bytes) {
    for (size_t off = 0, k = 0; off < bytes; off += MIB, k++)
        CHECK(cudaMemset(p + off, (int)((k * 37 + 11) & 0xff), bytes - off < MIB ? bytes - off : MIB));
    return 0;
}

// Reads the memory back in 64 MiB chunks and digests it on the CPU.
static int take_digest(const unsigned char *p, size_t bytes, unsigned char *host, unsigned long long out[2]) {
    const size_t chunk = 64 * MIB;
    out[0] = 1469598103934665603ull;
    out[1] = 0;
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        CHECK(cudaMemcpy(host, p + off, n, cudaMemcpyDeviceToHost));
        const unsigned long long *w = (const unsigned long long *)host;
        unsigned long long s = 0;
        for (size_t i = 0; i < n / 8; i++) s += w[i] * (2 * i + 1);
        out[0] = (out[0] ^ s) * 1099511628211ull;
        out[1] += s;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        printf("usage: holder GIB GO\n");
        return 2;
    }
    double gib = atof(argv[1]);
    size_t bytes = (size_t)(gib * (1ull << 30)) & ~(size_t)7;
    unsigned char *p, *host;
    CHECK(cudaMalloc(&p, bytes));
    CHECK(cudaMallocHost(&host, 64 * MIB));
    if (fill(p, bytes)) return 2;
    unsigned long long before[2], after[2];
    if (take_digest(p, bytes, host, before)) return 2;
    printf("READY %d %zu bytes digest %016llx %016llx\n", getpid(), bytes, before[0], before[1]);
    fflush(stdout);
    while (access(argv[2], F_OK) != 0) usleep(100000);
    if (take_digest(p, bytes, host, after)) return 2;
    bool same = before[0] == after[0] && before[1] == after[1];
    printf("%s digest %016llx %016llx\n", same ? "SAME" : "DIFFERENT", after[0], after[1]);
    return same ? 0 : 1;
}
