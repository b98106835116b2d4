import sys, os
sys.path.insert(0, "scripts")
import affine_kernels as a
import torch
a.SMS = torch.cuda.get_device_properties(0).multi_processor_count
for shape in os.environ.get("SHAPES", "4096x14336,28672x8192").split(","):
    in_f, out_f = (int(v) for v in shape.split("x"))
    t = int(os.environ.get("TOK", "1"))
    wt = a.Weights(4, 64, in_f, out_f, False, seed=1, keep_dense=False)
    x = (torch.rand((t, in_f), device="cuda") * 2 - 1).to(torch.bfloat16)
    a.run_kernel("stream", wt, x, t)
    torch.cuda.synchronize()
