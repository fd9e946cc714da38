// A second translation unit, so that a program built from it and
// tests/kernels/kernels.cu holds two fatbin containers.
extern "C" __global__ void pvgpu_second(float *x) { x[threadIdx.x] *= 2.0f; }

int main() { return 0; }
