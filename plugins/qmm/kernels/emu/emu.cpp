#include "emu.h"
EmuFiber* g_cur = nullptr;
emu_dim3 g_grid, g_bdim;
bool g_eager = false;
long g_progress = 0;
static ucontext_t g_sched;
static std::function<void()>* g_kernel = nullptr;

void emu_yield() { swapcontext(&g_cur->ctx, &g_sched); }

static void trampoline() {
    (*g_kernel)();
    if (!g_cur->open.empty()) { fprintf(stderr, "uncommitted cp.async at exit\n"); abort(); }
    for (auto& gr : g_cur->groups) if (!gr.empty()) { fprintf(stderr, "cp.async not waited at exit\n"); abort(); }
    g_cur->done = true;
    g_progress++;
}

void emu_launch(emu_dim3 grid, int threads, size_t smem, int cluster_x, std::function<void()> kernel) {
    g_grid = grid;
    g_bdim = emu_dim3{(unsigned)threads, 1, 1};
    g_kernel = &kernel;
    if (threads % 32) abort();
    if (grid.x % cluster_x) { fprintf(stderr, "grid.x not a multiple of the cluster\n"); abort(); }
    for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx0 = 0; bx0 < grid.x; bx0 += cluster_x) {
            EmuCluster cl;
            std::vector<std::unique_ptr<EmuBlock>> blocks;
            std::vector<std::unique_ptr<EmuFiber>> fibers;
            cl.bar.n = threads * cluster_x;
            for (int r = 0; r < cluster_x; ++r) {
                auto b = std::make_unique<EmuBlock>();
                b->idx = emu_dim3{bx0 + r, by, 0};
                b->smem.assign(smem + 16, 0xCD);   // poison
                b->bar.n = threads;
                b->warps.resize(threads / 32);
                for (auto& w : b->warps) w.bar.n = 32;
                b->rank = r;
                b->cl = &cl;
                cl.blocks.push_back(b.get());
                blocks.push_back(std::move(b));
            }
            for (int r = 0; r < cluster_x; ++r)
                for (int t = 0; t < threads; ++t) {
                    auto f = std::make_unique<EmuFiber>();
                    f->tid = t;
                    f->blk = blocks[r].get();
                    f->stack.resize(256 * 1024);
                    getcontext(&f->ctx);
                    f->ctx.uc_stack.ss_sp = f->stack.data();
                    f->ctx.uc_stack.ss_size = f->stack.size();
                    f->ctx.uc_link = &g_sched;
                    makecontext(&f->ctx, trampoline, 0);
                    fibers.push_back(std::move(f));
                }
            for (;;) {
                bool any = false;
                long before = g_progress;
                for (auto& f : fibers) {
                    if (f->done) continue;
                    any = true;
                    g_cur = f.get();
                    swapcontext(&g_sched, &f->ctx);
                }
                if (!any) break;
                if (g_progress == before) { fprintf(stderr, "deadlock in block (%u,%u)\n", bx0, by); abort(); }
            }
        }
}
