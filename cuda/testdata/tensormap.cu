// Test kernel for tensor maps (cuda.TensorMap). The PTX beside it is what
// nvcc 11.8 made of this file (nvcc -ptx -arch=sm_90 testdata/tensormap.cu
// -o testdata/tensormap.ptx) with its ".version 7.8" raised to 8.0 by hand:
// the tensor copy and the transaction-count barrier are PTX ISA 8.0
// instructions, which nvcc 11.8 copies from the inline asm unchecked.

struct alignas(64) kc_tensor_map { unsigned long long v[16]; };   // CUtensorMap

// kcand_tma_copy copies the box of a 2D tensor map at coordinates (c0
// innermost, c1) into shared memory with one tensor copy, then writes the
// bytes to out as they landed there (swizzled when the map swizzles).
// bytes is the box's size; the launch gives bytes + 8 bytes of dynamic
// shared memory (the box, then the barrier) and one thread.
extern "C" __global__ void kcand_tma_copy(const __grid_constant__ kc_tensor_map map, unsigned char* out,
                                          unsigned int bytes, int c0, int c1) {
    extern __shared__ __align__(1024) unsigned char box[];
    const unsigned int dst = (unsigned int)__cvta_generic_to_shared(box);
    const unsigned int bar = dst + bytes;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(dst), "l"(&map), "r"(c0), "r"(c1), "r"(bar) : "memory");
    unsigned int done = 0;
    while (!done) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar) : "memory");
    }
    for (unsigned int i = 0; i < bytes; ++i) out[i] = box[i];
}
