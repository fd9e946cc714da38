// Conditional nodes through NVIDIA's runtime, in the shapes NVIDIA's
// graphConditionalNodes sample uses them: an if node added by hand whose
// condition a kernel of the same graph sets; an if/else node; a do-while
// loop whose body is captured into the node's body graph with a default
// assigned at each launch; a while node added into a graph being captured
// (through cudaStreamGetCaptureInfo and cudaStreamUpdateCaptureDependencies);
// a switch node. Kernels in the bodies print which body ran (device
// printf), and every count is checked; the last line is PASS.
//
// Built by nvcc like any CUDA program; its kernels are ones pvgpu's host
// test double implements (by name), so CI runs it without a GPU.
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                               \
    do {                                                                       \
        cudaError_t e_ = (x);                                                  \
        if (e_ != cudaSuccess) {                                               \
            printf("FAIL: %s at line %d: %s\n", #x, __LINE__,                  \
                   cudaGetErrorName(e_));                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

extern "C" {
__global__ void pvgpu_cond_from_flag(const int *flag, cudaGraphConditionalHandle handle) {
    cudaGraphSetConditional(handle, (unsigned)*flag);
}

__global__ void pvgpu_cond_count_down(int *counter, cudaGraphConditionalHandle handle) {
    int v = --*counter;
    cudaGraphSetConditional(handle, v > 0 ? 1u : 0u);
}

__global__ void pvgpu_printf(int tag) {
    printf("pvgpu_printf tag %d block %d thread %d\n", tag, (int)blockIdx.x, (int)threadIdx.x);
}
}

static cudaGraphNodeParams kernel_node(void *func, void **args) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeKernel;
    p.kernel.func = func;
    p.kernel.gridDim = dim3(1);
    p.kernel.blockDim = dim3(1);
    p.kernel.kernelParams = args;
    return p;
}

static cudaGraphNodeParams conditional_node(cudaGraphConditionalHandle h, cudaGraphConditionalNodeType t, unsigned size) {
    cudaGraphNodeParams p = {};
    p.type = cudaGraphNodeTypeConditional;
    p.conditional.handle = h;
    p.conditional.type = t;
    p.conditional.size = size;
    return p;
}

// A body that prints `tag`.
static void print_body(cudaGraph_t body, int *tag) {
    void *args[] = {tag};
    cudaGraphNodeParams p = kernel_node((void *)pvgpu_printf, args);
    cudaGraphNode_t n;
    CHECK(cudaGraphAddNode(&n, body, nullptr, nullptr, 0, &p));
}

static void launch(cudaGraphExec_t e, cudaStream_t s) {
    CHECK(cudaGraphLaunch(e, s));
    CHECK(cudaStreamSynchronize(s));
}

static int read_int(const int *d) {
    int v;
    CHECK(cudaMemcpy(&v, d, sizeof v, cudaMemcpyDeviceToHost));
    return v;
}

static void set_int(int *d, int v) {
    CHECK(cudaMemcpy(d, &v, sizeof v, cudaMemcpyHostToDevice));
}

int main() {
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *flag, *counter;
    CHECK(cudaMalloc(&flag, sizeof(int)));
    CHECK(cudaMalloc(&counter, sizeof(int)));

    // if, by hand: the kernel before the node sets the condition.
    {
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h;
        CHECK(cudaGraphConditionalHandleCreate(&h, g));
        void *args[] = {&flag, &h};
        cudaGraphNodeParams kp = kernel_node((void *)pvgpu_cond_from_flag, args);
        cudaGraphNode_t k, c;
        CHECK(cudaGraphAddNode(&k, g, nullptr, nullptr, 0, &kp));
        cudaGraphNodeParams cp = conditional_node(h, cudaGraphCondTypeIf, 1);
        CHECK(cudaGraphAddNode(&c, g, &k, nullptr, 1, &cp));
        int tag = 1;
        print_body(cp.conditional.phGraph_out[0], &tag);
        cudaGraphNodeType t;
        CHECK(cudaGraphNodeGetType(c, &t));
        printf("if node type is conditional: %s\n", t == cudaGraphNodeTypeConditional ? "yes" : "NO");
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int v : {1, 0}) {
            set_int(flag, v);
            printf("if, flag %d:\n", v);
            launch(e, s);
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }

    // if/else.
    {
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h;
        CHECK(cudaGraphConditionalHandleCreate(&h, g));
        void *args[] = {&flag, &h};
        cudaGraphNodeParams kp = kernel_node((void *)pvgpu_cond_from_flag, args);
        cudaGraphNode_t k, c;
        CHECK(cudaGraphAddNode(&k, g, nullptr, nullptr, 0, &kp));
        cudaGraphNodeParams cp = conditional_node(h, cudaGraphCondTypeIf, 2);
        CHECK(cudaGraphAddNode(&c, g, &k, nullptr, 1, &cp));
        int then_tag = 2, else_tag = 3;
        print_body(cp.conditional.phGraph_out[0], &then_tag);
        print_body(cp.conditional.phGraph_out[1], &else_tag);
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int v : {0, 1}) {
            set_int(flag, v);
            printf("if/else, flag %d:\n", v);
            launch(e, s);
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }

    // do-while: the condition starts at 1 at each launch; the body is
    // captured into the node's body graph and counts down.
    {
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h;
        CHECK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
        cudaGraphNodeParams cp = conditional_node(h, cudaGraphCondTypeWhile, 1);
        cudaGraphNode_t c;
        CHECK(cudaGraphAddNode(&c, g, nullptr, nullptr, 0, &cp));
        cudaStream_t cap;
        CHECK(cudaStreamCreate(&cap));
        CHECK(cudaStreamBeginCaptureToGraph(cap, cp.conditional.phGraph_out[0], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
        pvgpu_cond_count_down<<<1, 1, 0, cap>>>(counter, h);
        pvgpu_printf<<<1, 1, 0, cap>>>(4);
        CHECK(cudaStreamEndCapture(cap, nullptr));
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int n : {3, 1}) {
            set_int(counter, n);
            printf("do-while from %d:\n", n);
            launch(e, s);
            printf("counter after: %d\n", read_int(counter));
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaStreamDestroy(cap));
    }

    // while, added into a graph being captured: the kernel before it sets
    // the condition, so the body may run no time at all.
    {
        cudaGraph_t g;
        CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        pvgpu_printf<<<1, 1, 0, s>>>(6);
        cudaStreamCaptureStatus st;
        const cudaGraphNode_t *deps;
        size_t ndeps;
        CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &g, &deps, nullptr, &ndeps));
        cudaGraphConditionalHandle h;
        CHECK(cudaGraphConditionalHandleCreate(&h, g));
        pvgpu_cond_from_flag<<<1, 1, 0, s>>>(flag, h);
        CHECK(cudaStreamGetCaptureInfo(s, &st, nullptr, &g, &deps, nullptr, &ndeps));
        cudaGraphNodeParams cp = conditional_node(h, cudaGraphCondTypeWhile, 1);
        cudaGraphNode_t c;
        CHECK(cudaGraphAddNode(&c, g, deps, nullptr, ndeps, &cp));
        CHECK(cudaStreamUpdateCaptureDependencies(s, &c, nullptr, 1, cudaStreamSetCaptureDependencies));
        CHECK(cudaStreamEndCapture(s, &g));
        cudaStream_t body;
        CHECK(cudaStreamCreate(&body));
        CHECK(cudaStreamBeginCaptureToGraph(body, cp.conditional.phGraph_out[0], nullptr, nullptr, 0, cudaStreamCaptureModeGlobal));
        pvgpu_printf<<<1, 1, 0, body>>>(5);
        // The body clears the flag's condition: it runs once when set.
        pvgpu_cond_from_flag<<<1, 1, 0, body>>>(counter, h);
        CHECK(cudaStreamEndCapture(body, nullptr));
        size_t nodes = 0;
        CHECK(cudaGraphGetNodes(g, nullptr, &nodes));
        printf("captured graph with a while node: %zu nodes\n", nodes);
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int v : {1, 0}) {
            set_int(flag, v);
            set_int(counter, 0);
            printf("captured while, flag %d:\n", v);
            launch(e, s);
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
        CHECK(cudaStreamDestroy(body));
    }

    // switch: body i prints 10 + i; a value past the last body runs none.
    {
        cudaGraph_t g;
        CHECK(cudaGraphCreate(&g, 0));
        cudaGraphConditionalHandle h;
        CHECK(cudaGraphConditionalHandleCreate(&h, g));
        void *args[] = {&flag, &h};
        cudaGraphNodeParams kp = kernel_node((void *)pvgpu_cond_from_flag, args);
        cudaGraphNode_t k, c;
        CHECK(cudaGraphAddNode(&k, g, nullptr, nullptr, 0, &kp));
        cudaGraphNodeParams cp = conditional_node(h, cudaGraphCondTypeSwitch, 4);
        CHECK(cudaGraphAddNode(&c, g, &k, nullptr, 1, &cp));
        int tags[4] = {10, 11, 12, 13};
        for (int i = 0; i < 4; i++) print_body(cp.conditional.phGraph_out[i], &tags[i]);
        cudaGraphExec_t e;
        CHECK(cudaGraphInstantiate(&e, g, 0));
        for (int v : {2, 0, 3, 9}) {
            set_int(flag, v);
            printf("switch, value %d:\n", v);
            launch(e, s);
        }
        CHECK(cudaGraphExecDestroy(e));
        CHECK(cudaGraphDestroy(g));
    }

    CHECK(cudaFree(flag));
    CHECK(cudaFree(counter));
    CHECK(cudaStreamDestroy(s));
    printf("PASS\n");
    return 0;
}
