// printf from kernels, in order with what the program prints.
#include "common.h"

__global__ void hello(int launch) {
    printf("hello from launch %d, block %d, thread %d\n", launch, blockIdx.x, threadIdx.x);
}

int main() {
    printf("host: before the kernels\n");
    for (int l = 0; l < 3; l++) {
        hello<<<1, 1>>>(l);
        CHECK(cudaDeviceSynchronize());
        printf("host: after launch %d\n", l);
    }
    hello<<<1, 1>>>(99);
    CHECK(cudaDeviceSynchronize());
    printf("Test PASSED\n");
    return 0;
}
