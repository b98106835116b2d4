// Test kernels for package cuda. Each writes a value that depends on its
// inputs and on the order the kernels ran in, so a test can tell a correct
// run from a stale buffer or a misordered one.

extern "C" __global__ void kcand_fill(unsigned int *out, unsigned int n, unsigned int seed) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = i * seed + 7u;
    }
}

// kcand_spin_affine waits ns nanoseconds of GPU time, then sets
// x[0] = x[0] * mul + add: non-commutative, so the result shows the order.
extern "C" __global__ void kcand_spin_affine(unsigned int *x, unsigned long long ns, unsigned int mul, unsigned int add) {
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
    x[0] = x[0] * mul + add;
}

// kcand_shared_sum sums 0..words-1 through dynamic shared memory, so it
// fails unless the launch really got words*4 bytes of it.
extern "C" __global__ void kcand_shared_sum(unsigned int *out, unsigned int words) {
    extern __shared__ unsigned int scratch[];
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) {
        scratch[i] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int sum = 0;
        for (unsigned int i = 0; i < words; i++) {
            sum += scratch[i];
        }
        out[blockIdx.x] = sum;
    }
}

extern "C" __global__ void kcand_empty(float *p, int n) {}

template <typename T>
__global__ void kcand_scale(T *data, T factor, unsigned int n) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        data[i] *= factor;
    }
}
